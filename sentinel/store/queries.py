"""Reads of the store for the policy and for operators; rows come back as records or plain dicts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, Table, func, select

from sentinel.events import ActionKind, Incident, IncidentStatus, Mode
from sentinel.store import schema as s
from sentinel.store.unit import Unit


class Queries:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def open_incident(self, node: str) -> Incident | None:
        with self.engine.connect() as conn:
            return Unit(conn).open_incident(node)

    def last_decision_action(self, incident_id: str) -> ActionKind | None:
        with self.engine.connect() as conn:
            return Unit(conn).last_decision_action(incident_id)

    def last_executed_ts(self, node: str) -> float | None:
        """When a disruptive action was last decided for execution (EXECUTE) on ``node``."""
        with self.engine.connect() as conn:
            return Unit(conn).last_executed_ts(node)

    def drained_by(self, node: str) -> str | None:
        with self.engine.connect() as conn:
            return Unit(conn).drained_by(node)

    def incident_counts(self, since_ts: float, node: str | None = None) -> dict[str, int]:
        """Incidents opened since ``since_ts`` per node (lemon tracking)."""
        with self.engine.connect() as conn:
            return Unit(conn).incident_counts(since_ts, node)

    def operator_queue(self, limit: int = 1000, include_acked: bool = False) -> list[dict[str, Any]]:
        """GPU reset and reboot requests, newest first: recorded for a person, never executed by Sentinel; only
        the open ones (not acknowledged) unless ``include_acked``."""
        query = (select(s.decisions).where(s.decisions.c.action.in_([a.value for a in _REQUESTS]))
                 .order_by(s.decisions.c.ts.desc()).limit(limit))
        if not include_acked:
            query = query.where(s.decisions.c.acked_ts.is_(None))
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def node_count(self) -> int:
        with self.engine.connect() as conn:
            return Unit(conn).node_count()

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
        self, node: str | None = None, since_ts: float | None = None, limit: int = 1000, alerts_only: bool = False,
    ) -> list[dict[str, Any]]:
        """Incidents newest first; ``alerts_only``: those graded into an operator-facing alert (the default view of
        ``sentinel incidents``), the rest being evidence that reached no one."""
        query = select(s.incidents).order_by(s.incidents.c.opened_ts.desc()).limit(limit)
        if alerts_only:
            query = query.where(s.incidents.c.alert_ts.is_not(None))
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

    def interruption_history(self) -> dict[str, Any]:
        """What ``sentinel advise checkpoint`` needs: node-days observed, GPUs, and each incident that got a drain
        decision (any mode) with its kind and the first such action (checkpoint first = caught ahead)."""
        n, d, i = s.nodes.c, s.decisions.c, s.incidents.c
        drains = (ActionKind.CHECKPOINT_DRAIN_REQUEUE.value, ActionKind.DRAIN_REQUEUE.value)
        with self.engine.connect() as conn:
            count, seconds, gpus = conn.execute(select(
                func.count(), func.coalesce(func.sum(n.last_seen_ts - n.first_seen_ts), 0.0),
                func.coalesce(func.sum(n.gpu_count), 0)).select_from(s.nodes)).one()
            rows = conn.execute(select(i.id, i.kind, d.action, d.ts).join(s.decisions, d.incident_id == i.id)
                                .where(d.action.in_(drains)).order_by(d.ts)).all()
        first: dict[str, tuple[str, str]] = {}
        for row in rows:
            first.setdefault(row.id, (row.kind, row.action))
        return {"nodes": int(count), "node_days": float(seconds) / 86_400.0, "gpus": int(gpus),
                "interruptions": [{"kind": kind, "ahead": action == ActionKind.CHECKPOINT_DRAIN_REQUEUE.value}
                                  for kind, action in first.values()]}

    def table(self, name: str, order_by: str = "ts") -> list[dict[str, Any]]:
        """Every row of one table (demo summaries, tests); not for large production tables."""
        table: Table = s.metadata.tables[name]
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(table).order_by(table.c[order_by])).mappings()]

    def node_states(self, silent_before_ts: float) -> dict[str, int]:
        """Known nodes as drained (held by Sentinel), silent (last sample stored before ``silent_before_ts``) or
        reporting; a drained node counts only as drained."""
        n = s.nodes.c
        drained = n.drained_incident_id.is_not(None)
        query = select(
            func.count(),
            func.count().filter(drained),
            func.count().filter(~drained & (n.last_seen_ts < silent_before_ts)),
        ).select_from(s.nodes)
        with self.engine.connect() as conn:
            total, held, silent = conn.execute(query).one()
        return {"reporting": int(total - held - silent), "silent": int(silent), "drained": int(held)}

    def open_alerts(self) -> dict[str, str]:
        """Nodes with an open (not resolved) incident graded into an alert, and that incident's kind."""
        i = s.incidents.c
        query = (select(i.node, i.kind).where(i.status != IncidentStatus.RESOLVED.value, i.alert_ts.is_not(None))
                 .order_by(i.opened_ts))
        with self.engine.connect() as conn:
            return {str(node): str(kind) for node, kind in conn.execute(query).all()}

    def open_incident_count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(_OPEN_INCIDENTS).scalar_one())

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self.engine.connect() as conn:
            for name in ("nodes", "gpus", "findings", "incidents", "decisions", "commands", "action_results"):
                out[name] = int(conn.execute(select(func.count()).select_from(s.metadata.tables[name])).scalar_one())
            out["open_incidents"] = int(conn.execute(_OPEN_INCIDENTS).scalar_one())
            out["drained_nodes"] = int(
                conn.execute(
                    select(func.count()).select_from(s.nodes).where(s.nodes.c.drained_incident_id.is_not(None))
                ).scalar_one()
            )
        return out


_REQUESTS = (ActionKind.REQUEST_GPU_RESET, ActionKind.REQUEST_REBOOT)
_OPEN_INCIDENTS = select(func.count()).select_from(s.incidents).where(
    s.incidents.c.status != IncidentStatus.RESOLVED.value)
