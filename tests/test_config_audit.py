"""Config and audit (issue 38, item 8): a secret anywhere in a URL counts and is redacted; operator actions
record who ran them as the kernel knows it, not an environment variable; every file of a model folder is checked
like the pickle and a symlink in one is refused. Each failed on e5bcaaa."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sentinel.cli.identity import operator_identity
from sentinel.cli.main import main
from sentinel.config import load
from sentinel.config.urls import redact_url, url_secrets
from sentinel.errors import ConfigError
from tests.test_hardening import _saved_model

NOBODY = 65534


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://sentinel:pa/ss@db/sentinel",  # a / in the password passed the old pattern
    "postgresql+psycopg://sentinel:p@ss@db/sentinel",
    "postgresql+psycopg://sentinel@db/sentinel?password=hunter2",
    "postgresql+psycopg://db/sentinel?sslmode=require&sslpassword=hunter2",
])
def test_a_secret_anywhere_in_the_store_url_counts_and_is_redacted(tmp_path: Path, url: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert url_secrets(url)
    shown = redact_url(url)
    assert "hunter2" not in shown and "pa/ss" not in shown and "p@ss" not in shown and "***" in shown
    path = tmp_path / "sentinel.toml"
    path.write_text(f'[store]\nurl = "{url}"\n')
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="others can read it"):
        load(str(path), {})
    path.chmod(0o600)
    assert main(["config", "check", str(path), "--output", "json"]) == 0
    printed = capsys.readouterr().out
    assert "hunter2" not in printed and "pa/ss" not in printed and "***" in printed


def test_a_url_without_a_secret_is_left_alone() -> None:
    for url in ("sqlite:///var/lib/sentinel/sentinel.db", "postgresql+psycopg://sentinel@db/sentinel?sslmode=verify-full"):
        assert url_secrets(url) == [] and redact_url(url) == url


def test_the_operator_is_the_login_user_not_an_environment_variable(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "mallory")
    monkeypatch.setenv("SUDO_USER", "mallory")
    loginuid = tmp_path / "loginuid"
    loginuid.write_text(f"{NOBODY}")  # logged in as nobody, then sudo to this user
    assert operator_identity(str(loginuid)) == f"nobody (as {operator_identity(str(tmp_path / 'none'))})"
    loginuid.write_text("4294967295")  # no login session (cron, a container): the effective user
    assert "mallory" not in operator_identity(str(loginuid))


def test_breaker_reset_records_who_reset_it(sqlite_url: str, repo, capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "mallory")
    assert main(["breaker", "reset", "--db", sqlite_url, "--output", "json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert state["reason"] == f"reset by {operator_identity()}" and "mallory" not in state["reason"]


def test_a_model_description_others_may_write_is_not_loaded(tmp_path: Path) -> None:
    from sentinel_models import persistence

    directory = _saved_model(tmp_path / "models")
    meta = directory / persistence.META_FILE
    meta.chmod(0o666)  # anyone may rewrite the hash it records
    with pytest.raises(ConfigError, match=r"model\.json: writable by group or others"):
        persistence.load(directory)
    meta.chmod(0o644)
    os.chown(meta, NOBODY, NOBODY)
    with pytest.raises(ConfigError, match=r"model\.json: owned by uid 65534"):
        persistence.load(directory)


def test_a_symlink_in_a_model_folder_is_refused(tmp_path: Path) -> None:
    from sentinel_models import persistence

    trusted = _saved_model(tmp_path / "trusted")
    directory = _saved_model(tmp_path / "models")
    (directory / persistence.MODEL_FILE).unlink()
    (directory / persistence.MODEL_FILE).symlink_to(trusted / persistence.MODEL_FILE)
    with pytest.raises(ConfigError, match="a symlink in a model folder"):
        persistence.load(directory)
