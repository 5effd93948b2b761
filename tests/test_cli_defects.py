"""Defects a new operator met (issue 17), each with the behaviour it should have had."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.cli.main import main
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


def test_the_demo_counts_fatal_faults_by_kind_apart_from_benign_events(tmp_path: Path) -> None:
    from sentinel.cli.demo import DemoOptions, run_demo

    s = run_demo(DemoOptions(seed=1, db_path=str(tmp_path / "d.db"), duration_s=1800.0)).summary
    assert sum(s["faults_by_kind"].values()) == s["faults_injected"] == 6
    assert sum(s["benign_by_kind"].values()) == s["benign_events"] == 3


def test_the_demo_refuses_a_run_too_short_for_its_own_faults(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--duration", "10m", "--db-path", str(tmp_path / "d.db")]) == 1
    assert "--duration: at least 30m" in capsys.readouterr().err


def test_the_demo_honours_output_json_and_refuses_store_and_config_flags_it_would_ignore(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["demo", "--duration", "30m", "--db-path", str(tmp_path / "d.db"), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["faults_injected"] == 6
    assert main(["demo", "--db", str(tmp_path / "other.db")]) == 1
    assert "--db-path" in capsys.readouterr().err
    assert main(["demo", "--config", str(tmp_path / "x.toml")]) == 1
    assert "builds its own config" in capsys.readouterr().err


def test_the_demo_epilogue_names_the_program_as_it_was_run(tmp_path: Path) -> None:
    from sentinel.cli.demo import DemoOptions, run_demo
    from sentinel.cli.demo_view import render_demo

    report = run_demo(DemoOptions(seed=2, db_path=str(tmp_path / "d.db"), duration_s=1800.0))
    text = render_demo(report, program=".venv/bin/sentinel")
    assert f".venv/bin/sentinel incidents --db {tmp_path / 'd.db'}" in text


def test_collect_once_shows_new_kernel_log_events_without_moving_the_agents_position(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before, `collect --once` advanced the agent's read position, so the agent never published the Xids it
    showed, and it printed only their count."""
    log = tmp_path / "kern.log"
    log.write_text("kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                   "the bus.\n")
    position = tmp_path / "kmsg.position"
    position.write_text(f"{log.stat().st_ino} 0\n")  # the agent has read nothing of the file yet
    config = tmp_path / "agent.toml"
    config.write_text(f'[agent]\ncollectors = ["kmsg"]\n[agent.kmsg]\npath = "{log}"\nstate_path = "{position}"\n')
    assert main(["collect", "--once", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "1 log event(s)" in out and "fallen off the bus" in out and "79" in out
    assert position.read_text() == f"{log.stat().st_ino} 0\n"  # untouched: the agent will still publish it


def test_collect_once_fails_when_a_collector_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(f'[agent]\ncollectors = ["nic"]\n[agent.nic]\nsysfs_root = "{tmp_path / "no-sys"}"\n')
    assert main(["collect", "--once", "--config", str(config)]) == 1
    assert "collector nic:" in capsys.readouterr().out


def test_table_headers_keep_their_units() -> None:
    from sentinel.tables import render

    header = render([{"s": 100}], [("s", "speed Mb/s")]).splitlines()[0]
    assert header == "SPEED Mb/s"
    assert render([{"n": 1}], [("n", "requested (UTC)")]).splitlines()[0] == "REQUESTED (UTC)"


def test_the_cli_reads_the_services_config_from_etc_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 17: `sentinel status` on the central server said `no store at sentinel.db`: the services' config
    and the store URL (in sentinel.env, which only systemd reads) were invisible to the CLI."""
    from sentinel.cli import verbs
    from sentinel.store.engine import make_engine, upgrade

    db = tmp_path / "central.db"
    upgrade(make_engine(f"sqlite:///{db}"))
    secret = tmp_path / "store-url"
    secret.write_text(f"sqlite:///{db}\n")
    secret.chmod(0o640)
    etc = tmp_path / "sentinel.toml"
    etc.write_text(f'[store]\nurl_file = "{secret}"\n')
    monkeypatch.setattr(verbs, "DEFAULT_CONFIG", str(etc))
    monkeypatch.delenv("SENTINEL_CONFIG", raising=False)
    assert main(["status", "-o", "json"]) == 0
    assert str(db) in capsys.readouterr().out


def test_a_secret_file_others_can_read_is_refused(tmp_path: Path) -> None:
    from sentinel.config import load

    secret = tmp_path / "store-url"
    secret.write_text("postgresql+psycopg://sentinel:pw@db/sentinel\n")
    secret.chmod(0o644)
    path = tmp_path / "sentinel.toml"
    path.write_text(f'[store]\nurl_file = "{secret}"\n')
    with pytest.raises(ConfigError, match="store.url_file.*readable by others"):
        load(path, environ={})
    secret.chmod(0o600)
    assert load(path, environ={}).store.url == "postgresql+psycopg://sentinel:pw@db/sentinel"


def test_config_check_never_prints_a_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sentinel.toml"
    path.write_text('[store]\nurl = "postgresql+psycopg://sentinel:hunter2@db/sentinel"\n'
                    '[transport.kafka.client]\nsasl_plain_password = "hunter3"\n')
    path.chmod(0o600)  # a config holding secrets that others can read is refused (issue 19)
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out and "hunter3" not in out and "sentinel:***@db" in out


@pytest.mark.parametrize(("raw", "valid"), [
    ({"policy": {"mode": "obsreve"}}, "valid: act, observe"),
    ({"actuator": {"slurm": {"signal_target": "x"}}}, "valid: batch, full"),
])
def test_an_enum_error_lists_the_valid_values(raw: dict, valid: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=valid):
        from_mapping(raw)


def test_db_upgrade_does_not_grow_a_folder_tree_for_a_mistyped_path(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "nonexistent" / "dir" / "x.db"
    assert main(["db", "upgrade", "--db", str(target)]) == 1
    assert not (tmp_path / "nonexistent").exists()
    assert "no folder" in capsys.readouterr().err
    assert main(["db", "upgrade", "--db", str(tmp_path / "x.db")]) == 0  # an existing folder is fine


def test_parse_log_has_a_header_and_says_how_bad_each_line_is(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "kern.log"
    log.write_text("NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
                   "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 24007, Fatal, Link 30 sourcetrack timeout error\n"
                   "an unrelated line\n")
    assert main(["parse-log", str(log)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["LINE", "KIND", "CODE", "SEVERITY", "PCI"]
    assert lines[1].split()[1:4] == ["xid", "79", "fatal"] and "fallen off the bus" in lines[1]
    assert lines[2].split()[1:4] == ["sxid", "24007", "fatal"]
    assert len(lines) == 3


def test_every_section_with_a_problem_is_reported_at_once() -> None:
    """Issue 17: errors stopped at the first config problem, so fixing a file took one run per mistake."""
    with pytest.raises(ConfigError) as caught:
        from_mapping({"policy": {"mode": "obsreve"}, "detector": {"window_samples": -1},
                      "store": {"url": "foo://bar"}, "agnet": {}})
    text = str(caught.value)
    assert text.startswith("4 problems")
    for path in ("policy.mode", "detector.window_samples", "store.url", "agnet: unknown key"):
        assert path in text, path


def test_every_problem_inside_one_section_is_reported_at_once() -> None:
    """Issue 17: several mistakes in one section (and its subsections) all show in one run, and a key that is
    fine is not blamed."""
    with pytest.raises(ConfigError) as caught:
        from_mapping({"policy": {"mode": "obsreve", "cooldown_s": -5, "cooldwn_s": 1, "command_ttl_s": 60,
                                 "breaker": {"max_fraction": 7, "window_s": "1h"}}})
    text = str(caught.value)
    assert text.startswith("5 problems"), text
    for path in ("policy.mode", "policy.cooldown_s", "policy.cooldwn_s: unknown key", "policy.breaker.max_fraction",
                 "policy.breaker.window_s"):
        assert path in text, path
    assert "command_ttl_s" not in text
