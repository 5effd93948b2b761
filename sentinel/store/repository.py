"""Reads and writes of the store; records in and out are ``sentinel.events`` types or plain dicts, never ORM rows.

Every write of a record keyed by its stable id is insert-if-absent, so replaying a message after a crash or a
redelivery changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Table, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from sentinel.events import (
    ActionKind,
    ActionResult,
    Command,
    Decision,
    Finding,
    FindingClass,
    Incident,
    IncidentStatus,
    Mode,
    Severity,
    TelemetrySample,
)
from sentinel.store import schema as s


@dataclass(frozen=True)
class BreakerRow:
    is_open: bool
    reason: str
    changed_ts: float
    recent: list[tuple[float, str]]


class Repository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._upserts: dict[tuple[str, str, tuple[str, ...]], Any] = {}

    # ----- writes -------------------------------------------------------------------------------------------
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
            self._upsert(conn, s.nodes, node_rows, keys=["name"], update_cols=["last_seen_ts", "gpu_count", "boot_id"])
            self._upsert(
                conn,
                s.gpus,
                gpu_rows,
                keys=["node", "gpu_index"],
                update_cols=["uuid", "pci_bus_id", "model", "state", "last_seen_ts", "temp_c"],
            )

    def ensure_node(self, node: str, ts: float) -> None:
        with self.engine.begin() as conn:
            self._insert_ignore(
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
            self._upsert(
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
            return self._insert_ignore(conn, s.findings, [row]) > 0

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
            return self._insert_ignore(conn, s.decisions, [row]) > 0

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
            return self._insert_ignore(conn, s.commands, [row]) > 0

    def add_results(self, results: Iterable[ActionResult], command_status: str | None = None) -> None:
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
        with self.engine.begin() as conn:
            if rows:
                self._insert_ignore(conn, s.action_results, rows)
            if command_status and rows:
                conn.execute(
                    update(s.commands).where(s.commands.c.id == rows[0]["command_id"]).values(status=command_status)
                )

    def set_node_drained(self, node: str, incident_id: str | None) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(s.nodes).where(s.nodes.c.name == node).values(drained_incident_id=incident_id))

    def load_breaker(self) -> BreakerRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(s.breaker_state).where(s.breaker_state.c.id == 1)).mappings().first()
        if row is None:
            return None
        return BreakerRow(
            bool(row["is_open"]),
            row["reason"],
            row["changed_ts"],
            [(float(ts), str(node)) for ts, node in row["recent"]],
        )

    def save_breaker(self, state: BreakerRow) -> None:
        row = {
            "id": 1,
            "is_open": state.is_open,
            "reason": state.reason,
            "changed_ts": state.changed_ts,
            "recent": [[ts, node] for ts, node in state.recent],
        }
        with self.engine.begin() as conn:
            self._upsert(
                conn, s.breaker_state, row, keys=["id"], update_cols=["is_open", "reason", "changed_ts", "recent"]
            )

    # ----- reads --------------------------------------------------------------------------------------------
    def open_incident(self, node: str) -> Incident | None:
        query = (
            select(s.incidents)
            .where(s.incidents.c.node == node, s.incidents.c.status != IncidentStatus.RESOLVED.value)
            .order_by(s.incidents.c.opened_ts.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
            if row is None:
                return None
            ids = (
                conn.execute(
                    select(s.findings.c.id).where(s.findings.c.incident_id == row["id"]).order_by(s.findings.c.ts)
                )
                .scalars()
                .all()
            )
        return _incident(row, list(ids))

    def last_decision_action(self, incident_id: str) -> ActionKind | None:
        with self.engine.connect() as conn:
            value = conn.execute(_last_decision_query(incident_id)).scalar_one_or_none()
        return None if value is None else ActionKind(value)

    def last_executed_ts(self, node: str) -> float | None:
        """When a disruptive action was last carried out (EXECUTE) on ``node``."""
        query = select(func.max(s.decisions.c.ts)).where(
            s.decisions.c.node == node,
            s.decisions.c.mode == Mode.EXECUTE.value,
            s.decisions.c.action.in_([ActionKind.CHECKPOINT_DRAIN_REQUEUE.value, ActionKind.DRAIN_REQUEUE.value]),
        )
        with self.engine.connect() as conn:
            value = conn.execute(query).scalar_one_or_none()
        return None if value is None else float(value)

    def drained_by(self, node: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(select(s.nodes.c.drained_incident_id).where(s.nodes.c.name == node)).scalar()

    def node_count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(s.nodes)).scalar_one())

    def nodes(self) -> list[dict[str, Any]]:
        open_q = (
            select(s.incidents.c.node, func.count().label("n"))
            .where(s.incidents.c.status != IncidentStatus.RESOLVED.value)
            .group_by(s.incidents.c.node)
            .subquery()
        )
        query = (
            select(s.nodes, func.coalesce(open_q.c.n, 0).label("open_incidents"))
            .outerjoin(open_q, open_q.c.node == s.nodes.c.name)
            .order_by(s.nodes.c.name)
        )
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def incidents(
        self, node: str | None = None, since_ts: float | None = None, limit: int = 1000
    ) -> list[dict[str, Any]]:
        query = select(s.incidents).order_by(s.incidents.c.opened_ts.desc()).limit(limit)
        if node is not None:
            query = query.where(s.incidents.c.node == node)
        if since_ts is not None:
            query = query.where(s.incidents.c.updated_ts >= since_ts)
        with self.engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(query).mappings()]
            for row in rows:
                row["findings"] = conn.execute(
                    select(func.count()).select_from(s.findings).where(s.findings.c.incident_id == row["id"])
                ).scalar_one()
                decided = conn.execute(
                    select(s.decisions.c.action, s.decisions.c.mode)
                    .where(s.decisions.c.incident_id == row["id"])
                    .order_by(s.decisions.c.ts)
                ).all()
                executed = [d.action for d in decided if d.mode == Mode.EXECUTE.value]
                if executed:
                    row["decision"] = executed[-1]
                elif decided:
                    row["decision"] = f"{decided[-1].action} (observed)"
                else:
                    row["decision"] = ""
        return rows

    def table(self, name: str, order_by: str = "ts") -> list[dict[str, Any]]:
        """Every row of one table (demo summaries, tests); not for large production tables."""
        table: Table = s.metadata.tables[name]
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(table).order_by(table.c[order_by])).mappings()]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self.engine.connect() as conn:
            for name in ("nodes", "gpus", "findings", "incidents", "decisions", "commands", "action_results"):
                out[name] = int(conn.execute(select(func.count()).select_from(s.metadata.tables[name])).scalar_one())
            out["open_incidents"] = int(
                conn.execute(
                    select(func.count())
                    .select_from(s.incidents)
                    .where(s.incidents.c.status != IncidentStatus.RESOLVED.value)
                ).scalar_one()
            )
            out["drained_nodes"] = int(
                conn.execute(
                    select(func.count()).select_from(s.nodes).where(s.nodes.c.drained_incident_id.is_not(None))
                ).scalar_one()
            )
        return out

    # ----- helpers ------------------------------------------------------------------------------------------
    def _insert_stmt(self, conn: Connection, table: Table):  # type: ignore[no-untyped-def]
        if conn.dialect.name == "postgresql":
            return postgresql.insert(table)
        if conn.dialect.name == "sqlite":
            return sqlite.insert(table)
        return insert(table)

    def _insert_ignore(self, conn: Connection, table: Table, rows: list[dict[str, Any]]) -> int:
        """Insert rows whose key is new; return how many were inserted (0 when all existed)."""
        stmt = self._insert_stmt(conn, table).on_conflict_do_nothing()
        if len(rows) == 1:
            # RETURNING, not rowcount: psycopg 3 reports -1 for INSERT .. ON CONFLICT through SQLAlchemy.
            key = list(table.primary_key.columns)[0]
            return len(conn.execute(stmt.values(rows[0]).returning(key)).all())
        conn.execute(stmt, rows)
        return len(rows)  # executemany gives no reliable rowcount; callers of batches ignore it

    def _upsert(
        self,
        conn: Connection,
        table: Table,
        rows: dict[str, Any] | list[dict[str, Any]],
        keys: list[str],
        update_cols: list[str],
    ) -> None:
        """Insert rows, or update ``update_cols`` where the key exists (one statement, executemany)."""
        rows = [rows] if isinstance(rows, dict) else rows
        if not rows:
            return
        cache_key = (conn.dialect.name, table.name, tuple(update_cols))
        stmt = self._upserts.get(cache_key)
        if stmt is None:
            base = self._insert_stmt(conn, table)
            stmt = self._upserts[cache_key] = base.on_conflict_do_update(
                index_elements=keys, set_={c: base.excluded[c] for c in update_cols}
            )
        conn.execute(stmt, rows)


def _incident(row: Any, finding_ids: list[str]) -> Incident:
    return Incident(
        id=row["id"],
        node=row["node"],
        opened_ts=row["opened_ts"],
        updated_ts=row["updated_ts"],
        status=IncidentStatus(row["status"]),
        severity=Severity(row["severity"]),
        kind=FindingClass(row["kind"]),
        summary=row["summary"],
        finding_ids=finding_ids,
    )


def _last_decision_query(incident_id: str):  # type: ignore[no-untyped-def]
    return (
        select(s.decisions.c.action)
        .where(s.decisions.c.incident_id == incident_id)
        .order_by(s.decisions.c.ts.desc())
        .limit(1)
    )
