"""Reads and writes on one open connection, so a caller can make several of them one transaction.

``Repository.unit()`` opens a transaction and hands out a ``Unit``; the controller reads the facts the policy
needs, and stores the incident, the finding, the decisions, the breaker state and the outgoing command (the
outbox row) in one commit. The repository's single-statement methods use the same code on their own
transaction, so there is one way to write each record.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select, update

from sentinel.events import (
    ActionKind,
    Command,
    Decision,
    Finding,
    FindingClass,
    Incident,
    IncidentStatus,
    Mode,
    Recommendation,
    Severity,
)
from sentinel.policy import plans
from sentinel.policy.breaker import CLOSED, BreakerState
from sentinel.store import schema as s
from sentinel.store.sql import insert_ignore, upsert

CHAIN = [action.value for action in plans.CHAIN]  # operator requests sit beside the escalation chain
DISRUPTIVE = [action.value for action in plans.DISRUPTIVE]


class Unit:
    """Statements on ``conn``; the caller owns the transaction."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    # --- the breaker ---------------------------------------------------------------------------------------
    def lock_breaker(self) -> BreakerState:
        """Read the breaker holding its lock until the transaction ends: the first statement writes (an insert
        of the initial row, ignored when it exists), which takes SQLite's write lock, so a second controller
        waits (busy timeout) instead of judging on a stale window; on PostgreSQL the row is read FOR UPDATE."""
        insert_ignore(self.conn, s.breaker_state, [_breaker_values(CLOSED)])
        row = self.conn.execute(select(s.breaker_state).where(s.breaker_state.c.id == 1).with_for_update()
                                ).mappings().one()
        return breaker_row(row)

    def write_breaker(self, state: BreakerState) -> None:
        upsert(self.conn, s.breaker_state, _breaker_values(state), keys=["id"],
               update_cols=["is_open", "reason", "changed_ts", "recent"])

    # --- reads the policy needs ------------------------------------------------------------------------------
    def open_incident(self, node: str) -> Incident | None:
        query = (select(s.incidents)
                 .where(s.incidents.c.node == node, s.incidents.c.status != IncidentStatus.RESOLVED.value)
                 .order_by(s.incidents.c.opened_ts.desc()).limit(1))
        row = self.conn.execute(query).mappings().first()
        if row is None:
            return None
        ids = self.conn.execute(select(s.findings.c.id).where(s.findings.c.incident_id == row["id"])
                                .order_by(s.findings.c.ts)).scalars().all()
        return _incident(row, list(ids))

    def last_decision_action(self, incident_id: str) -> ActionKind | None:
        query = (select(s.decisions.c.action)
                 .where(s.decisions.c.incident_id == incident_id, s.decisions.c.action.in_(CHAIN))
                 .order_by(s.decisions.c.ts.desc()).limit(1))
        value = self.conn.execute(query).scalar_one_or_none()
        return None if value is None else ActionKind(value)

    def last_executed_ts(self, node: str) -> float | None:
        """When a disruptive action was last decided for execution (EXECUTE) on ``node``."""
        value = self.conn.execute(select(func.max(s.decisions.c.ts)).where(
            s.decisions.c.node == node, s.decisions.c.mode == Mode.EXECUTE.value,
            s.decisions.c.action.in_(DISRUPTIVE))).scalar_one_or_none()
        return None if value is None else float(value)

    def drained_by(self, node: str) -> str | None:
        return self.conn.execute(select(s.nodes.c.drained_incident_id).where(s.nodes.c.name == node)).scalar()

    def pending_command(self, node: str) -> str | None:
        """The incident of a command on ``node`` that is decided but not finished (sent or still in the outbox)."""
        return self.conn.execute(select(s.commands.c.incident_id).where(
            s.commands.c.node == node, s.commands.c.status == "pending").limit(1)).scalar()

    def is_managed(self, node: str) -> bool:
        """Whether the scheduler's stored node list holds ``node`` (False while no list is stored)."""
        query = select(s.scheduler_nodes.c.name).where(s.scheduler_nodes.c.name == node).limit(1)
        return self.conn.execute(query).first() is not None

    def held_out(self) -> int:
        """Nodes Sentinel holds out of service: drained by it, or with a drain decided and not finished."""
        drained = select(s.nodes.c.name).where(s.nodes.c.drained_incident_id.is_not(None))
        pending = select(s.commands.c.node).where(s.commands.c.status == "pending")
        union = drained.union(pending).subquery()
        return int(self.conn.execute(select(func.count()).select_from(union)).scalar_one())

    def incident_counts(self, since_ts: float, node: str | None = None) -> dict[str, int]:
        """Incidents opened since ``since_ts`` per node (lemon tracking)."""
        query = (select(s.incidents.c.node, func.count()).where(s.incidents.c.opened_ts >= since_ts)
                 .group_by(s.incidents.c.node))
        if node is not None:
            query = query.where(s.incidents.c.node == node)
        return {str(n): int(c) for n, c in self.conn.execute(query).all()}

    def node_findings(self, node: str, since_ts: float) -> list[Finding]:
        """The node's findings observed since ``since_ts`` (what the alert grading weighs a new finding against)."""
        f = s.findings.c
        # ts (when concluded) is never before observed_ts, and (node, ts) is indexed
        rows = self.conn.execute(select(s.findings).where(f.node == node, f.ts >= since_ts)
                                 .order_by(f.observed_ts)).mappings().all()
        return [finding_from_row(r) for r in rows if r["observed_ts"] >= since_ts]

    def last_alert_end(self, node: str, before_ts: float) -> float | None:
        """When the node's last alerted incident was resolved (its ``updated_ts``), if before ``before_ts``."""
        i = s.incidents.c
        value = self.conn.execute(select(func.max(i.updated_ts)).where(
            i.node == node, i.alert_ts.is_not(None), i.status == IncidentStatus.RESOLVED.value,
            i.updated_ts <= before_ts)).scalar_one_or_none()
        return None if value is None else float(value)

    def node_count(self) -> int:
        """The fleet the breaker's fraction is taken of: the nodes seen that the scheduler manages, once its list
        is stored (names on the telemetry topic alone can be invented, issue 19; nodes without an agent, such as
        CPU nodes, do not count either); every node seen before that."""
        if self.conn.execute(select(s.scheduler_nodes.c.name).limit(1)).first() is None:
            return int(self.conn.execute(select(func.count()).select_from(s.nodes)).scalar_one())
        managed = s.nodes.c.name.in_(select(s.scheduler_nodes.c.name))
        return int(self.conn.execute(select(func.count()).select_from(s.nodes).where(managed)).scalar_one())

    # --- writes ----------------------------------------------------------------------------------------------
    def ensure_node(self, node: str, ts: float) -> None:
        insert_ignore(self.conn, s.nodes, [{"name": node, "first_seen_ts": ts, "last_seen_ts": ts, "gpu_count": 0,
                                            "boot_id": "", "drained_incident_id": None}])

    def save_incident(self, incident: Incident) -> None:
        row = {"id": incident.id, "node": incident.node, "opened_ts": incident.opened_ts,
               "updated_ts": incident.updated_ts, "status": incident.status.value,
               "severity": incident.severity.value, "kind": incident.kind.value, "summary": incident.summary,
               "alert_ts": incident.alert_ts, "alert_reason": incident.alert_reason,
               "alert_held": incident.alert_held}
        upsert(self.conn, s.incidents, row, keys=["id"],
               update_cols=["updated_ts", "status", "severity", "kind", "summary", "alert_ts", "alert_reason",
                            "alert_held"])

    def add_finding(self, finding: Finding, incident_id: str | None) -> bool:
        """Store a finding; False if it was already stored (redelivery)."""
        return insert_ignore(self.conn, s.findings, [{
            "id": finding.id, "node": finding.node, "incident_id": incident_id, "ts": finding.ts,
            "observed_ts": finding.observed_ts, "gpu_index": finding.gpu_index, "kind": finding.kind.value,
            "rule": finding.rule, "severity": finding.severity.value,
            "recommendation": finding.recommendation.value, "confidence": finding.confidence,
            "summary": finding.summary, "evidence": dict(finding.evidence)}]) > 0

    def add_decision(self, decision: Decision) -> bool:
        return insert_ignore(self.conn, s.decisions, [{
            "id": decision.id, "incident_id": decision.incident_id, "node": decision.node, "ts": decision.ts,
            "action": decision.action.value, "mode": decision.mode.value, "reason": decision.reason,
            "blocked_by": list(decision.blocked_by)}]) > 0

    def add_command(self, command: Command, seal: bytes = b"") -> bool:
        """Put ``command`` in the outbox (status pending, not sent yet) with the controller's ``seal`` of it
        (``sentinel.actuator.sealed``; the outbox refuses a row without a valid one); False if it was there."""
        return insert_ignore(self.conn, s.commands, [{
            "id": command.id, "decision_id": command.decision_id, "incident_id": command.incident_id,
            "node": command.node, "action": command.action.value, "ts": command.ts,
            "expires_ts": command.expires_ts, "drain_reason": command.drain_reason, "status": "pending",
            "sent_ts": None, "seal": seal or None}]) > 0

    def set_command_status(self, command_id: str, status: str) -> None:
        self.conn.execute(update(s.commands).where(s.commands.c.id == command_id).values(status=status))


def breaker_row(row: Any) -> BreakerState:
    return BreakerState(bool(row["is_open"]), row["reason"], row["changed_ts"],
                      [(float(ts), str(node)) for ts, node in row["recent"]])


def _breaker_values(state: BreakerState) -> dict[str, Any]:
    return {"id": 1, "is_open": state.is_open, "reason": state.reason, "changed_ts": state.changed_ts,
            "recent": [[ts, node] for ts, node in state.recent]}


def _incident(row: Any, finding_ids: list[str]) -> Incident:
    return Incident(id=row["id"], node=row["node"], opened_ts=row["opened_ts"], updated_ts=row["updated_ts"],
                    status=IncidentStatus(row["status"]), severity=Severity(row["severity"]),
                    kind=FindingClass(row["kind"]), summary=row["summary"], finding_ids=finding_ids,
                    alert_ts=row["alert_ts"], alert_reason=row["alert_reason"] or "",
                    alert_held=bool(row["alert_held"]))


def finding_from_row(row: Any) -> Finding:
    return Finding(id=row["id"], node=row["node"], ts=row["ts"], observed_ts=row["observed_ts"],
                   kind=FindingClass(row["kind"]), rule=row["rule"], severity=Severity(row["severity"]),
                   recommendation=Recommendation(row["recommendation"]), confidence=row["confidence"],
                   summary=row["summary"], gpu_index=row["gpu_index"], evidence=dict(row["evidence"] or {}))
