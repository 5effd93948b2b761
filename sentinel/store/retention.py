"""Retention: the store drops what stops mattering, in batches, so it does not grow without bound.

What goes, each older than its own cut-off (``store.retention`` in the config; None keeps a kind forever):
- resolved incidents, with their findings, decisions, commands and action steps (never an open or mitigated one,
  never a command still pending);
- findings that opened no incident (information only);
- the actuator's journal of commands finished (or expired) before the cut-off, with their steps, and command
  nonces past their expiry (a replay of those fails on expiry anyway);
- load bins and forecasts as they were made, and jobs of the job table that ended;
- nodes not heard from since the cut-off that hold no drain, incident or finding (a node taken out of the fleet
  stops counting toward it).

Each delete touches at most ``batch`` rows per statement and commits, so a large first prune never holds a long
lock over tables the controller writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine, Table, and_, delete, exists, or_, select
from sqlalchemy.sql.elements import ColumnElement

from sentinel.events import IncidentStatus
from sentinel.store import schema as s


@dataclass(frozen=True)
class Cutoffs:
    """Epoch seconds before which each kind goes; None keeps it."""

    resolved_incidents: float | None = None
    findings: float | None = None
    journal: float | None = None
    load_bins: float | None = None
    forecasts: float | None = None
    nodes: float | None = None
    queue_jobs: float | None = None  # jobs of the job table that ended before this


def prune(engine: Engine, cutoffs: Cutoffs, now: float, batch: int = 5000) -> dict[str, int]:
    """Delete what the cut-offs let go; rows deleted per table."""
    counts: dict[str, int] = {}

    def count(table: Table, n: int) -> None:
        if n:
            counts[table.name] = counts.get(table.name, 0) + n

    if cutoffs.resolved_incidents is not None:
        _incidents(engine, cutoffs.resolved_incidents, batch, count)
    if cutoffs.findings is not None:
        _by_key(engine, s.findings, s.findings.c.id,
                and_(s.findings.c.incident_id.is_(None), s.findings.c.ts < cutoffs.findings), batch, count)
    if cutoffs.journal is not None:
        old = or_(s.actuator_commands.c.finished_ts < cutoffs.journal,
                  s.actuator_commands.c.expires_ts < cutoffs.journal)
        while ids := _ids(engine, s.actuator_commands.c.command_id, old, batch):
            with engine.begin() as conn:
                count(s.actuator_steps, conn.execute(
                    delete(s.actuator_steps).where(s.actuator_steps.c.command_id.in_(ids))).rowcount or 0)
                count(s.actuator_commands, conn.execute(
                    delete(s.actuator_commands).where(s.actuator_commands.c.command_id.in_(ids))).rowcount or 0)
    _by_key(engine, s.command_nonces, s.command_nonces.c.nonce, s.command_nonces.c.expires_ts < now, batch, count)
    if cutoffs.load_bins is not None:
        _by_key(engine, s.load_bins, s.load_bins.c.ts, s.load_bins.c.ts < cutoffs.load_bins, batch, count)
    if cutoffs.forecasts is not None:
        _by_key(engine, s.forecasts, s.forecasts.c.made_ts, s.forecasts.c.made_ts < cutoffs.forecasts, batch, count)
    if cutoffs.queue_jobs is not None:
        _by_key(engine, s.queue_jobs, s.queue_jobs.c.job_id, s.queue_jobs.c.end_ts < cutoffs.queue_jobs, batch,
                count)
    if cutoffs.nodes is not None:
        gone = and_(s.nodes.c.last_seen_ts < cutoffs.nodes, s.nodes.c.drained_incident_id.is_(None),
                    ~exists().where(s.incidents.c.node == s.nodes.c.name),
                    ~exists().where(s.findings.c.node == s.nodes.c.name))
        while names := _ids(engine, s.nodes.c.name, gone, batch):
            with engine.begin() as conn:
                count(s.gpus, conn.execute(delete(s.gpus).where(s.gpus.c.node.in_(names))).rowcount or 0)
                count(s.nodes, conn.execute(delete(s.nodes).where(s.nodes.c.name.in_(names))).rowcount or 0)
    return counts


def _incidents(engine: Engine, cutoff: float, batch: int, count: Callable[[Table, int], None]) -> None:
    done = and_(s.incidents.c.status == IncidentStatus.RESOLVED.value, s.incidents.c.updated_ts < cutoff,
                ~exists().where(and_(s.commands.c.incident_id == s.incidents.c.id, s.commands.c.status == "pending")))
    while ids := _ids(engine, s.incidents.c.id, done, batch):
        with engine.begin() as conn:
            commands = select(s.commands.c.id).where(s.commands.c.incident_id.in_(ids))
            for table, where in ((s.action_results, s.action_results.c.command_id.in_(commands)),
                                 (s.commands, s.commands.c.incident_id.in_(ids)),
                                 (s.decisions, s.decisions.c.incident_id.in_(ids)),
                                 (s.findings, s.findings.c.incident_id.in_(ids)),
                                 (s.incidents, s.incidents.c.id.in_(ids))):
                count(table, conn.execute(delete(table).where(where)).rowcount or 0)


def _ids(engine: Engine, key: ColumnElement, where: ColumnElement[bool], batch: int) -> list:  # type: ignore[type-arg]
    with engine.connect() as conn:
        return list(conn.execute(select(key).where(where).limit(batch)).scalars())


def _by_key(engine: Engine, table: Table, key: ColumnElement, where: ColumnElement[bool],  # type: ignore[type-arg]
            batch: int, count: Callable[[Table, int], None]) -> None:
    while keys := _ids(engine, key, where, batch):
        with engine.begin() as conn:
            count(table, conn.execute(delete(table).where(and_(key.in_(keys), where))).rowcount or 0)
