"""`sentinel incident show ID` and the operator queue's acknowledgements, on a store the real pipeline filled."""

from __future__ import annotations

import json

import pytest

from sentinel.cli.identity import operator_identity
from sentinel.cli.main import main
from sentinel.store.repository import Repository
from tests.test_pipeline import make_rig


def _drained_store(repo: Repository) -> str:
    rig = make_rig(repo)
    rig.xid("gpu-node-003", 79)
    rig.tick()
    [incident] = repo.incidents()
    return str(incident["id"])


def test_incident_show_tells_the_whole_story_of_an_incident(repo: Repository, sqlite_url: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    incident_id = _drained_store(repo)
    assert main(["incident", "show", incident_id, "--db", sqlite_url, "-o", "json"]) == 0
    detail = json.loads(capsys.readouterr().out)
    assert detail["id"] == incident_id and detail["status"] == "mitigated"
    assert [f["rule"] for f in detail["findings"]] == ["xid-catalog"] and detail["findings"][0]["evidence"]
    assert {d["action"] for d in detail["decisions"]} == {"drain_requeue", "request_reboot"}
    assert [c["status"] for c in detail["commands"]] == ["done"] and detail["commands"][0]["sent_ts"]
    assert [s["step"] for s in detail["steps"]] == ["drain", "requeue", "verify"]
    assert all(s["after_s"] >= 0 for s in detail["steps"])
    assert main(["incident", "show", incident_id, "--db", sqlite_url]) == 0
    table = capsys.readouterr().out
    for section in ("findings:", "decisions:", "commands:", "action steps:", "sentinel: " + incident_id):
        assert section in table


def test_an_unknown_incident_is_a_clear_error(repo: Repository, sqlite_url: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    _drained_store(repo)
    assert main(["incident", "show", "inc-nope-1", "--db", sqlite_url]) == 1
    assert "no incident 'inc-nope-1'" in capsys.readouterr().err


def test_requests_lists_open_ones_and_an_acknowledged_request_leaves_the_queue(
        repo: Repository, sqlite_url: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    _drained_store(repo)
    assert main(["requests", "--db", sqlite_url, "-o", "json"]) == 0
    [request] = json.loads(capsys.readouterr().out)
    assert request["action"] == "request_reboot" and request["acked_ts"] is None
    monkeypatch.setenv("USER", "alice")  # anyone can set these: they are not who acknowledged (issue 38)
    monkeypatch.setenv("SUDO_USER", "alice")
    me = operator_identity()
    assert main(["requests", "ack", request["id"], "--db", sqlite_url]) == 0
    assert f"acknowledged by {me}" in capsys.readouterr().out and "alice" not in me
    assert main(["requests", "--db", sqlite_url, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []  # open ones only
    assert main(["requests", "--all", "--db", sqlite_url, "-o", "json"]) == 0
    [done] = json.loads(capsys.readouterr().out)
    assert done["acked_by"] == me and done["acked_ts"] > 0
    assert main(["requests", "ack", request["id"], "--db", sqlite_url]) == 1  # already done: no open request
    assert "no open request" in capsys.readouterr().err
