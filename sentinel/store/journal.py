"""The actuator's journal in the store (``sentinel.actuator.journal.Journal``): survives the actuator's restart."""

from __future__ import annotations

from sqlalchemy import Engine, or_, select, update

from sentinel import codec
from sentinel.events import ActionResult, Command, Step
from sentinel.store import schema as s
from sentinel.store.sql import insert_ignore


class StoreJournal:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def accept(self, command: Command, now: float, envelope: bytes) -> bool:
        with self.engine.begin() as conn:
            return insert_ignore(conn, s.actuator_commands, [{
                "command_id": command.id, "node": command.node, "payload": codec.encode(command),
                "expires_ts": command.expires_ts, "accepted_ts": now, "finished_ts": None, "owner": None,
                "lease_until_ts": None, "envelope": envelope}]) > 0

    def steps(self, command_id: str) -> list[ActionResult]:
        with self.engine.connect() as conn:
            payloads = conn.execute(select(s.actuator_steps.c.payload)
                                    .where(s.actuator_steps.c.command_id == command_id)).scalars().all()
        results = [codec.decode_as(p, ActionResult) for p in payloads]
        order = list(Step)
        return sorted(results, key=lambda r: order.index(r.step))

    def record(self, result: ActionResult, now: float) -> None:
        with self.engine.begin() as conn:
            insert_ignore(conn, s.actuator_steps, [{"command_id": result.command_id, "step": result.step.value,
                                                    "payload": codec.encode(result)}])
            if result.step is Step.VERIFY:
                conn.execute(update(s.actuator_commands).where(s.actuator_commands.c.command_id == result.command_id)
                             .values(finished_ts=now))

    def finished(self, command_id: str) -> bool:
        with self.engine.connect() as conn:
            row = conn.execute(select(s.actuator_commands.c.finished_ts)
                               .where(s.actuator_commands.c.command_id == command_id)).first()
        return row is not None and row[0] is not None

    def claim(self, command_id: str, owner: str, now: float, lease_s: float) -> bool:
        c = s.actuator_commands.c
        with self.engine.begin() as conn:  # one conditional UPDATE: atomic on SQLite and PostgreSQL
            done = conn.execute(update(s.actuator_commands).where(
                c.command_id == command_id, or_(c.owner.is_(None), c.owner == owner, c.lease_until_ts < now))
                .values(owner=owner, lease_until_ts=now + lease_s))
        return bool(done.rowcount)

    def release(self, command_id: str, owner: str) -> None:
        c = s.actuator_commands.c
        with self.engine.begin() as conn:
            conn.execute(update(s.actuator_commands).where(c.command_id == command_id, c.owner == owner)
                         .values(owner=None, lease_until_ts=None))

    def unfinished(self, now: float) -> list[tuple[str, bytes]]:
        c = s.actuator_commands.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(c.command_id, c.envelope).where(c.finished_ts.is_(None))
                                .order_by(c.accepted_ts)).all()
        return [(str(command_id), bytes(envelope or b"")) for command_id, envelope in rows]

    def refuse(self, command_id: str, now: float) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(s.actuator_commands).where(s.actuator_commands.c.command_id == command_id)
                         .values(finished_ts=now, owner=None, lease_until_ts=None))
