"""Reads and writes of the store; records in and out are ``sentinel.events`` types or plain dicts, never ORM rows.

Every write of a record keyed by its stable id is insert-if-absent, so replaying a message after a crash or a
redelivery changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from sqlalchemy import Engine, delete, insert, or_, select, update

from sentinel.events import (
    ActionKind,
    ActionResult,
    Command,
    Decision,
    Finding,
    Incident,
    IncidentStatus,
    TelemetrySample,
)
from sentinel.policy.breaker import BreakerState
from sentinel.store import schema as s
from sentinel.store.queries import Queries
from sentinel.store.sql import insert_ignore, upsert
from sentinel.store.unit import Unit, breaker_row

__all__ = ["Repository"]

T = TypeVar("T")


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

    def unit(self) -> AbstractContextManager[Unit]:
        """One transaction: every statement on the ``Unit`` commits together or not at all."""
        return _unit(self.engine)

    def ensure_node(self, node: str, ts: float) -> None:
        with self.unit() as u:
            u.ensure_node(node, ts)

    def save_incident(self, incident: Incident) -> None:
        with self.unit() as u:
            u.save_incident(incident)

    def add_finding(self, finding: Finding, incident_id: str | None) -> bool:
        """Store a finding; False if it was already stored (redelivery)."""
        with self.unit() as u:
            return u.add_finding(finding, incident_id)

    def add_decision(self, decision: Decision) -> bool:
        with self.unit() as u:
            return u.add_decision(decision)

    def add_command(self, command: Command, seal: bytes = b"") -> bool:
        with self.unit() as u:
            return u.add_command(command, seal)

    # --- the outbox ----------------------------------------------------------------------------------------
    def commands_to_send(self, now: float, resend_after_s: float,
                         limit: int = 100) -> list[tuple[Command, float | None, bytes]]:
        """Pending, unexpired commands never sent, or sent more than ``resend_after_s`` ago with no final result
        stored yet (the actuator, or its result, may have been lost), with when they were last sent and the
        controller's seal (``b""`` for none): oldest first."""
        c = s.commands.c
        query = (select(s.commands).where(c.status == "pending", c.expires_ts > now,
                                          or_(c.sent_ts.is_(None), c.sent_ts <= now - resend_after_s))
                 .order_by(c.ts).limit(limit))
        with self.engine.connect() as conn:
            return [(_command(r), r["sent_ts"], bytes(r["seal"] or b"")) for r in conn.execute(query).mappings()]

    def refuse_command(self, command_id: str) -> None:
        """An outbox row whose seal does not hold it: never sent (status ``refused``)."""
        with self.engine.begin() as conn:
            conn.execute(update(s.commands).where(s.commands.c.id == command_id, s.commands.c.status == "pending")
                         .values(status="refused"))

    def mark_sent(self, command_id: str, now: float) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(s.commands).where(s.commands.c.id == command_id).values(sent_ts=now))

    def expire_commands(self, now: float) -> list[str]:
        """Mark pending commands past their expiry ``expired`` (the actuator refuses them); return their ids.

        Not one the actuator accepted and has not finished: it carries an accepted command out even past its
        expiry (a checkpoint wait, slurmctld retries), so it stays pending, holding its node out of service for
        the breaker and for the next decision, until its result arrives."""
        c, a = s.commands.c, s.actuator_commands.c
        under_way = select(a.command_id).where(a.command_id == c.id, a.finished_ts.is_(None)).exists()
        with self.engine.begin() as conn:
            ids = list(conn.execute(select(c.id).where(c.status == "pending", c.expires_ts <= now, ~under_way))
                       .scalars())
            if ids:
                conn.execute(update(s.commands).where(c.id.in_(ids)).values(status="expired"))
        return ids

    def command_target(self, command_id: str) -> tuple[str, str] | None:
        """(node, incident id) of a command this store issued; None for an id it never issued."""
        c = s.commands.c
        with self.engine.connect() as conn:
            row = conn.execute(select(c.node, c.incident_id).where(c.id == command_id)).first()
        return (row[0], row[1]) if row is not None else None

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

    def ack_request(self, decision_id: str, by: str, now: float) -> bool:
        """Mark an operator request done; False when there is no such open request."""
        d = s.decisions.c
        with self.engine.begin() as conn:
            requests = [ActionKind.REQUEST_GPU_RESET.value, ActionKind.REQUEST_REBOOT.value]
            done = conn.execute(update(s.decisions).where(
                d.id == decision_id, d.action.in_(requests), d.acked_ts.is_(None))
                .values(acked_ts=now, acked_by=by[:100]))
        return bool(done.rowcount)

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

    def set_scheduler_nodes(self, names: Sequence[str], now: float) -> None:
        """Replace the list of nodes the scheduler manages."""
        with self.engine.begin() as conn:
            conn.execute(delete(s.scheduler_nodes))
            if names:
                conn.execute(insert(s.scheduler_nodes), [{"name": n, "listed_ts": now} for n in dict.fromkeys(names)])

    def scheduler_nodes(self) -> set[str]:
        """The nodes the scheduler manages (empty: never listed, every name is accepted)."""
        with self.engine.connect() as conn:
            return set(conn.execute(select(s.scheduler_nodes.c.name)).scalars())

    def drained_nodes(self) -> list[tuple[str, str]]:
        """(node, incident id) of every node the store marks drained by Sentinel."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(s.nodes.c.name, s.nodes.c.drained_incident_id)
                                .where(s.nodes.c.drained_incident_id.is_not(None))).all()
        return [(str(name), str(incident)) for name, incident in rows]

    def node_returned(self, node: str, incident_id: str, now: float) -> None:
        """The node is back in service: its drain mark cleared and its incident (if still open) resolved."""
        with self.engine.begin() as conn:
            conn.execute(update(s.nodes).where(s.nodes.c.name == node, s.nodes.c.drained_incident_id == incident_id)
                         .values(drained_incident_id=None))
            conn.execute(update(s.incidents).where(s.incidents.c.id == incident_id,
                                                   s.incidents.c.status != IncidentStatus.RESOLVED.value)
                         .values(status=IncidentStatus.RESOLVED.value, updated_ts=now))

    def set_node_drained(self, node: str, incident_id: str | None) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(s.nodes).where(s.nodes.c.name == node).values(drained_incident_id=incident_id))

    def load_breaker(self) -> BreakerState | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(s.breaker_state).where(s.breaker_state.c.id == 1)).mappings().first()
        return None if row is None else breaker_row(row)

    def save_breaker(self, state: BreakerState) -> None:
        with self.unit() as u:
            u.write_breaker(state)

    def update_breaker(self, change: Callable[[BreakerState], tuple[T, BreakerState | None]]) -> T:
        """Read the breaker, let ``change`` decide (a pure function: its result and the new state, or None for
        no change) and write, in one transaction that holds the breaker's lock (``Unit.lock_breaker``)."""
        with self.unit() as u:
            result, new = change(u.lock_breaker())
            if new is not None:
                u.write_breaker(new)
        return result

    def remember_nonce(self, nonce: str, expires_ts: float, now: float) -> bool:
        """Record a signed command's nonce until it expires; False if it was recorded before (a replay).

        Expired nonces are dropped here: a replay of one fails the expiry check before it reaches this table.
        """
        with self.engine.begin() as conn:
            conn.execute(delete(s.command_nonces).where(s.command_nonces.c.expires_ts < now))
            return insert_ignore(conn, s.command_nonces, [{"nonce": nonce, "expires_ts": expires_ts,
                                                            "seen_ts": now}]) > 0



@contextmanager
def _unit(engine: Engine) -> Iterator[Unit]:
    with engine.begin() as conn:
        yield Unit(conn)


def _command(row: Any) -> Command:
    return Command(id=row["id"], decision_id=row["decision_id"], incident_id=row["incident_id"], node=row["node"],
                   action=ActionKind(row["action"]), ts=row["ts"], expires_ts=row["expires_ts"],
                   drain_reason=row["drain_reason"])
