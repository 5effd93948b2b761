"""``sentinel advise checkpoint`` on a real SQLite store holding known incidents and decisions."""

from __future__ import annotations

import json
import math

import pytest

from sentinel.cli.main import main
from sentinel.store import schema as s
from sentinel.store.repository import Repository

DAY = 86_400.0


def _store(repo: Repository, nodes: int, days: float, drains: list[str]) -> None:
    """``nodes`` nodes of 8 GPUs seen for ``days``; one incident per entry of ``drains`` with that first action."""
    with repo.engine.begin() as conn:
        conn.execute(s.nodes.insert(), [{"name": f"gpu-{i:03d}", "first_seen_ts": 1e9, "last_seen_ts": 1e9 + days * DAY,
                                         "gpu_count": 8, "boot_id": ""} for i in range(nodes)])
        for k, action in enumerate(drains):
            kind = "predicted_failure" if action == "checkpoint_drain_requeue" else "gpu_xid"
            conn.execute(s.incidents.insert(), {"id": f"inc-{k}", "node": f"gpu-{k:03d}", "opened_ts": 1e9 + k,
                                                "updated_ts": 1e9 + k, "status": "open", "severity": "critical",
                                                "kind": kind, "summary": "x"})
            for j, act in enumerate((action, "alert")):
                conn.execute(s.decisions.insert(), {"id": f"dec-{k}-{j}", "incident_id": f"inc-{k}",
                                                    "node": f"gpu-{k:03d}", "ts": 1e9 + k + j, "action": act,
                                                    "mode": "observe", "reason": "r", "blocked_by": []})


def _advise(db: str, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert main(["advise", "checkpoint", "--db", db, "--output", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_advise_checkpoint_returns_young_and_daly_computed_by_hand(repo: Repository, sqlite_url: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # 100 nodes for 20 days = 2,000 node-days (enough history: no prior); 10 interruptions, 6 caught ahead.
    _store(repo, 100, 20.0, ["checkpoint_drain_requeue"] * 6 + ["drain_requeue"] * 4)
    a = _advise(sqlite_url, capsys, "--job-gpus", "800", "--write-s", "30", "--restart-s", "600", "--hang-s", "600")
    assert a["rate_source"] == "history" and a["rate_per_1000_node_days"] == 5.0
    mtbf = 1 / (100 * 5 / 1000 / DAY)  # 100 nodes x 5 per 1,000 node-days = one every 2 days = 172,800 s
    assert a["job_mtbf_s"] == pytest.approx(mtbf, abs=0.1)
    assert a["young_interval_s"] == pytest.approx(math.sqrt(2 * 30 * mtbf), abs=0.1)  # 3,219.9 s
    assert a["daly_interval_s"] == pytest.approx(math.sqrt(2 * 30 * (mtbf + 1200)), abs=0.1)
    assert a["caught_ahead_share"] == 0.6 and a["by_kind"] == {"predicted_failure": 6, "gpu_xid": 4}
    assert a["recommended_interval_with_proactive_s"] > a["recommended_interval_s"]
    assert a["expected_ettr_with_proactive"] > a["expected_ettr_reactive"]


def test_a_short_history_is_blended_with_the_published_rate_and_says_so(repo: Repository, sqlite_url: str,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _store(repo, 10, 2.0, [])  # 20 node-days, nothing recorded
    a = _advise(sqlite_url, capsys)
    assert "Llama 3 prior" in a["rate_source"] and a["job_gpus"] == 80
    assert a["rate_per_1000_node_days"] == pytest.approx(419 * 1000 / (2048 * 54) * 1000 / 1020, abs=1e-3)
    assert a["caught_ahead_share"] == 0.0 and "no interruptions" in a["caught_ahead_source"]
    assert main(["advise", "checkpoint", "--db", sqlite_url, "--caught-ahead", "1.5"]) == 1
