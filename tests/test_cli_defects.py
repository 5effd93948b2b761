"""Defects a new operator met (issue 17), each with the behaviour it should have had."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.cli import main
from sentinel.config import from_mapping
from sentinel.errors import ConfigError


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == "sentinel 0.1.0"


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n" * 100)
    assert main(["status", "--db", str(notes)]) == 1
    err = capsys.readouterr().err
    assert "not a Sentinel store" in err and str(notes) in err and "Traceback" not in err


def test_a_postgresql_url_without_its_driver_names_the_extra(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--db", "postgresql+pg8000://u:secret@localhost/sentinel"]) == 1
    err = capsys.readouterr().err
    assert "pg8000" in err and "postgresql+psycopg://" in err and "[postgres]" in err and "secret" not in err


def test_config_check_refuses_a_store_url_of_an_unknown_kind() -> None:
    with pytest.raises(ConfigError, match="store.url"):
        from_mapping({"store": {"url": "foo://bar"}})
    from_mapping({"store": {"url": "postgresql+psycopg://u@h/db"}})  # both supported kinds still pass
    from_mapping({"store": {"url": "sqlite:///x.db"}})


def test_keygen_on_a_folder_says_it_is_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keygen", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "is a directory" in err and "already exists" not in err


def test_the_demo_refuses_to_delete_a_file_that_is_not_a_demo_store(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    precious = tmp_path / "thesis.txt"
    precious.write_text("years of work")
    assert main(["demo", "--db-path", str(precious)]) == 1
    assert precious.read_text() == "years of work"
    assert "not a demo store" in capsys.readouterr().err
