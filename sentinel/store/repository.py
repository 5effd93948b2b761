"""Reads and writes of the store; records in and out are ``sentinel.events`` types or plain dicts, never ORM rows.

Every write of a record keyed by its stable id is insert-if-absent, so replaying a message after a crash or a
redelivery changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import delete, select, update

from sentinel.events import (
    ActionResult,
    Command,
    Decision,
    Finding,
    Incident,
    IncidentStatus,
    TelemetrySample,
)
from sentinel.store import schema as s
from sentinel.store.queries import Queries
from sentinel.store.sql import insert_ignore, upsert

T = TypeVar("T")


@dataclass(frozen=True)
class BreakerRow:
    is_open: bool
    reason: str
    changed_ts: float
    recent: list[tuple[float, str]]


class Repository(Queries):
    """Writes (here) and reads (``Queries``) of the store."""

    def record_samples(self, samples: Sequence[TelemetrySample]) -> None:
        """Upsert the nodes and GPUs seen in a batch of telemetry (last value wins)."""
        if not samples:
            return
        latest: dict[str, TelemetrySample] = {}
        for sample in samples:
            if sample.node not in latest or sample.ts >= latest[sample.node].ts:
                latest[sample.node] = sample
        node_rows: list[dict[str, Any]] = []
        gpu_rows: list[dict[str, Any]] = []
        for sample in latest.values():
            node_rows.append(
                {
                    "name": sample.node,
                    "first_seen_ts": sample.ts,
                    "last_seen_ts": sample.ts,
                    "gpu_count": len(sample.gpus),
                    "boot_id": sample.host.boot_id if sample.host else "",
                    "drained_incident_id": None,
                }
            )
            gpu_rows.extend(
                {
                    "node": sample.node,
                    "gpu_index": g.index,
                    "uuid": g.uuid,
                    "pci_bus_id": g.pci_bus_id,
                    "model": g.model,
                    "state": g.state.value,
                    "last_seen_ts": sample.ts,
                    "temp_c": g.temp_c,
                }
                for g in sample.gpus
            )
        with self.engine.begin() as conn:
            upsert(conn, s.nodes, node_rows, keys=["name"], update_cols=["last_seen_ts", "gpu_count", "boot_id"])
            upsert(
                conn,
                s.gpus,
                gpu_rows,
                keys=["node", "gpu_index"],
                update_cols=["uuid", "pci_bus_id", "model", "state", "last_seen_ts", "temp_c"],
            )

    def ensure_node(self, node: str, ts: float) -> None:
        with self.engine.begin() as conn:
            insert_ignore(
                conn,
                s.nodes,
                [
                    {
                        "name": node,
                        "first_seen_ts": ts,
                        "last_seen_ts": ts,
                        "gpu_count": 0,
                        "boot_id": "",
                        "drained_incident_id": None,
                    }
                ],
            )

    def save_incident(self, incident: Incident) -> None:
        row = {
            "id": incident.id,
            "node": incident.node,
            "opened_ts": incident.opened_ts,
            "updated_ts": incident.updated_ts,
            "status": incident.status.value,
            "severity": incident.severity.value,
            "kind": incident.kind.value,
            "summary": incident.summary,
        }
        with self.engine.begin() as conn:
            upsert(
                conn, s.incidents, row, keys=["id"], update_cols=["updated_ts", "status", "severity", "kind", "summary"]
            )

    def add_finding(self, finding: Finding, incident_id: str | None) -> bool:
        """Store a finding; False if it was already stored (redelivery)."""
        row = {
            "id": finding.id,
            "node": finding.node,
            "incident_id": incident_id,
            "ts": finding.ts,
            "observed_ts": finding.observed_ts,
            "gpu_index": finding.gpu_index,
            "kind": finding.kind.value,
            "rule": finding.rule,
            "severity": finding.severity.value,
            "recommendation": finding.recommendation.value,
            "confidence": finding.confidence,
            "summary": finding.summary,
            "evidence": dict(finding.evidence),
        }
        with self.engine.begin() as conn:
            return insert_ignore(conn, s.findings, [row]) > 0

    def add_decision(self, decision: Decision) -> bool:
        row = {
            "id": decision.id,
            "incident_id": decision.incident_id,
            "node": decision.node,
            "ts": decision.ts,
            "action": decision.action.value,
            "mode": decision.mode.value,
            "reason": decision.reason,
            "blocked_by": list(decision.blocked_by),
        }
        with self.engine.begin() as conn:
            return insert_ignore(conn, s.decisions, [row]) > 0

    def add_command(self, command: Command) -> bool:
        row = {
            "id": command.id,
            "decision_id": command.decision_id,
            "incident_id": command.incident_id,
            "node": command.node,
            "action": command.action.value,
            "ts": command.ts,
            "expires_ts": command.expires_ts,
            "drain_reason": command.drain_reason,
            "status": "pending",
        }
        with self.engine.begin() as conn:
            return insert_ignore(conn, s.commands, [row]) > 0

    def add_results(self, results: Iterable[ActionResult], command_status: str | None = None) -> int:
        """Store results not stored yet (ids are stable); return how many were new (exact for one result)."""
        rows = [
            {
                "id": r.id,
                "command_id": r.command_id,
                "node": r.node,
                "ts": r.ts,
                "step": r.step.value,
                "status": r.status.value,
                "detail": r.detail,
                "job_ids": list(r.job_ids),
            }
            for r in results
        ]
        added = 0
        with self.engine.begin() as conn:
            if rows:
                added = insert_ignore(conn, s.action_results, rows)
            if command_status and rows:
                conn.execute(
                    update(s.commands).where(s.commands.c.id == rows[0]["command_id"]).values(status=command_status)
                )
        return added

    def resolve_quiet_incidents(self, quiet_since_ts: float, now: float) -> int:
        """Resolve open incidents (not acted on) without a finding since ``quiet_since_ts``; return how many.

        Mitigated incidents stay: their node is held drained until an operator resumes it.
        """
        with self.engine.begin() as conn:
            result = conn.execute(
                update(s.incidents)
                .where(s.incidents.c.status == IncidentStatus.OPEN.value, s.incidents.c.updated_ts < quiet_since_ts)
                .values(status=IncidentStatus.RESOLVED.value, updated_ts=now)
            )
        return int(result.rowcount or 0)

    def set_node_drained(self, node: str, incident_id: str | None) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(s.nodes).where(s.nodes.c.name == node).values(drained_incident_id=incident_id))

    def load_breaker(self) -> BreakerRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(s.breaker_state).where(s.breaker_state.c.id == 1)).mappings().first()
        return None if row is None else _breaker_row(row)

    def save_breaker(self, state: BreakerRow) -> None:
        with self.engine.begin() as conn:
            _write_breaker(conn, state)

    def update_breaker(self, change: Callable[[BreakerRow], tuple[T, BreakerRow | None]]) -> T:
        """Read the breaker, let ``change`` decide (a pure function: its result and the new state, or None for
        no change) and write, in one transaction that holds the breaker's lock: any number of controllers on
        one store see each other's admissions. The first statement writes (an insert of the initial row that
        is ignored when it exists), which takes SQLite's write lock, so a second writer waits (busy timeout)
        instead of deciding on a stale window; on PostgreSQL the row is read ``FOR UPDATE``."""
        with self.engine.begin() as conn:
            insert_ignore(conn, s.breaker_state, [_breaker_values(BreakerRow(False, "", 0.0, []))])
            row = conn.execute(select(s.breaker_state).where(s.breaker_state.c.id == 1).with_for_update()
                               ).mappings().one()
            result, new = change(_breaker_row(row))
            if new is not None:
                _write_breaker(conn, new)
        return result

    def remember_nonce(self, nonce: str, expires_ts: float, now: float) -> bool:
        """Record a signed command's nonce until it expires; False if it was recorded before (a replay).

        Expired nonces are dropped here: a replay of one fails the expiry check before it reaches this table.
        """
        with self.engine.begin() as conn:
            conn.execute(delete(s.command_nonces).where(s.command_nonces.c.expires_ts < now))
            return insert_ignore(conn, s.command_nonces, [{"nonce": nonce, "expires_ts": expires_ts,
                                                            "seen_ts": now}]) > 0


def _breaker_row(row: Any) -> BreakerRow:
    return BreakerRow(bool(row["is_open"]), row["reason"], row["changed_ts"],
                      [(float(ts), str(node)) for ts, node in row["recent"]])


def _breaker_values(state: BreakerRow) -> dict[str, Any]:
    return {"id": 1, "is_open": state.is_open, "reason": state.reason, "changed_ts": state.changed_ts,
            "recent": [[ts, node] for ts, node in state.recent]}


def _write_breaker(conn: Any, state: BreakerRow) -> None:
    upsert(conn, s.breaker_state, _breaker_values(state), keys=["id"],
           update_cols=["is_open", "reason", "changed_ts", "recent"])
