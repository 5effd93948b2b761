"""Store retention (issue 18): what has stopped mattering goes, in batches, and nothing that still matters does
(open incidents, pending commands, drained nodes, nodes with history), on SQLite and on PostgreSQL."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import Engine, insert, select

from sentinel.config import from_mapping
from sentinel.controller.housekeeping import DAY_S, cutoffs
from sentinel.store import schema as s
from sentinel.store.engine import make_engine, upgrade
from sentinel.store.retention import prune
from tests.pg import fresh_postgres_store

NOW = 1_800_000_000.0
OLD, RECENT = NOW - 200 * DAY_S, NOW - DAY_S


def _fill(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(insert(s.nodes), [
            {"name": n, "first_seen_ts": OLD, "last_seen_ts": ts, "gpu_count": 8, "boot_id": "",
             "drained_incident_id": d}
            for n, ts, d in (("n-live", RECENT, None), ("n-history", OLD, None), ("n-gone", OLD, None),
                             ("n-drained", OLD, "inc-open"))])
        conn.execute(insert(s.gpus), [{"node": n, "gpu_index": 0, "state": "ok", "last_seen_ts": OLD}
                                      for n in ("n-gone", "n-live")])
        incidents = [("inc-old", "n-gone", "resolved", OLD), ("inc-new", "n-history", "resolved", RECENT),
                     ("inc-open", "n-drained", "mitigated", OLD), ("inc-pending", "n-live", "resolved", OLD)]
        conn.execute(insert(s.incidents), [
            {"id": i, "node": n, "opened_ts": ts, "updated_ts": ts, "status": st, "severity": "fatal",
             "kind": "gpu_xid", "summary": "Xid 79"} for i, n, st, ts in incidents])
        conn.execute(insert(s.findings), [
            {"id": f"f-{i}", "node": n, "incident_id": i, "ts": ts, "observed_ts": ts, "kind": "gpu_xid",
             "rule": "xid", "severity": "fatal", "recommendation": "drain", "confidence": 1.0, "summary": "x",
             "evidence": {}} for i, n, _, ts in incidents] + [
            {"id": f"info-{k}", "node": "n-live", "incident_id": None, "ts": ts, "observed_ts": ts,
             "kind": "gpu_thermal", "rule": "t", "severity": "info", "recommendation": "none", "confidence": 0.1,
             "summary": "x", "evidence": {}} for k, ts in enumerate((OLD, OLD, OLD, RECENT))])
        conn.execute(insert(s.decisions), [
            {"id": f"d-{i}", "incident_id": i, "node": n, "ts": ts, "action": "drain_requeue", "mode": "execute",
             "reason": "x", "blocked_by": []} for i, n, _, ts in incidents])
        conn.execute(insert(s.commands), [
            {"id": f"c-{i}", "decision_id": f"d-{i}", "incident_id": i, "node": n, "action": "drain_requeue",
             "ts": ts, "expires_ts": ts + 300, "drain_reason": "sentinel: x",
             "status": "pending" if i == "inc-pending" else "done"} for i, n, _, ts in incidents])
        conn.execute(insert(s.action_results), [
            {"id": f"r-{i}", "command_id": f"c-{i}", "node": n, "ts": ts, "step": "verify", "status": "ok",
             "detail": "", "job_ids": []} for i, n, _, ts in incidents])
        conn.execute(insert(s.actuator_commands), [
            {"command_id": c, "node": "n-live", "payload": b"x", "expires_ts": ts + 300, "accepted_ts": ts,
             "finished_ts": fin} for c, ts, fin in (("j-old", OLD, OLD), ("j-new", RECENT, None))])
        conn.execute(insert(s.actuator_steps), [{"command_id": "j-old", "step": "drain", "payload": b"x"},
                                                {"command_id": "j-new", "step": "drain", "payload": b"x"}])
        conn.execute(insert(s.command_nonces), [{"nonce": "a", "expires_ts": NOW - 1, "seen_ts": OLD},
                                                {"nonce": "b", "expires_ts": NOW + 60, "seen_ts": NOW}])
        conn.execute(insert(s.load_bins), [
            {"ts": ts, "partition": p, "running_gpus": 1.0, "pending_gpus": 0.0, "source": "squeue"}
            for ts in (NOW - 500 * DAY_S, RECENT) for p in ("all", "gpu")])


def _ids(engine: Engine, table, key) -> set:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return set(conn.execute(select(key)).scalars())


def _check(engine: Engine) -> None:
    _fill(engine)
    config = from_mapping({}).store.retention
    counts = prune(engine, cutoffs(config, NOW), NOW, batch=2)  # small batches: the loops are exercised
    assert _ids(engine, s.incidents, s.incidents.c.id) == {"inc-new", "inc-open", "inc-pending"}
    assert _ids(engine, s.findings, s.findings.c.id) == {"f-inc-new", "f-inc-open", "f-inc-pending", "info-3"}
    assert _ids(engine, s.commands, s.commands.c.id) == {"c-inc-new", "c-inc-open", "c-inc-pending"}
    assert _ids(engine, s.action_results, s.action_results.c.id) == {"r-inc-new", "r-inc-open", "r-inc-pending"}
    assert _ids(engine, s.decisions, s.decisions.c.id) == {"d-inc-new", "d-inc-open", "d-inc-pending"}
    assert _ids(engine, s.actuator_commands, s.actuator_commands.c.command_id) == {"j-new"}
    assert _ids(engine, s.actuator_steps, s.actuator_steps.c.command_id) == {"j-new"}
    assert _ids(engine, s.command_nonces, s.command_nonces.c.nonce) == {"b"}
    assert _ids(engine, s.load_bins, s.load_bins.c.ts) == {RECENT}
    # a node gone quiet whose history went too goes (with its GPUs); one with recent history or a drain stays
    assert _ids(engine, s.nodes, s.nodes.c.name) == {"n-live", "n-history", "n-drained"}
    assert _ids(engine, s.gpus, s.gpus.c.node) == {"n-live"}
    assert counts == {"incidents": 1, "findings": 4, "decisions": 1, "commands": 1, "action_results": 1,
                      "actuator_commands": 1, "actuator_steps": 1, "command_nonces": 1, "load_bins": 2,
                      "nodes": 1, "gpus": 1}
    assert prune(engine, cutoffs(config, NOW), NOW) == {}  # nothing left to let go


def test_retention_on_sqlite(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    upgrade(engine)
    _check(engine)


@pytest.mark.postgres
def test_retention_on_postgresql(pg_url: str) -> None:
    _check(fresh_postgres_store(pg_url).engine)


def test_zero_keeps_a_kind_forever() -> None:
    kept = cutoffs(from_mapping({"store": {"retention": {"load_bins_days": 0}}}).store.retention, NOW)
    assert kept.load_bins is None and kept.resolved_incidents == NOW - 90 * DAY_S


def test_db_prune_from_the_command_line(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(insert(s.load_bins), [{"ts": 1000.0, "partition": "all", "running_gpus": 1.0,
                                            "pending_gpus": 0.0, "source": "squeue"}])
    done = subprocess.run([sys.executable, "-m", "sentinel.cli", "db", "prune", "--db", sqlite_url, "-o", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert '"load_bins": 1' in done.stdout
