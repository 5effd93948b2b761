"""One incident in full, for ``sentinel incident show``: what was seen, decided, ordered and done, in order."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select

from sentinel.store import schema as s


def incident_detail(engine: Engine, incident_id: str) -> dict[str, Any] | None:
    """The incident row with its findings (evidence included), decisions (guards and reasons), commands (outbox
    state) and every action step (with its time after the command); None when there is no such incident."""
    with engine.connect() as conn:
        row = conn.execute(select(s.incidents).where(s.incidents.c.id == incident_id)).mappings().first()
        if row is None:
            return None
        findings = [dict(r) for r in conn.execute(
            select(s.findings).where(s.findings.c.incident_id == incident_id).order_by(s.findings.c.ts)).mappings()]
        decisions = [dict(r) for r in conn.execute(
            select(s.decisions).where(s.decisions.c.incident_id == incident_id)
            .order_by(s.decisions.c.ts)).mappings()]
        commands = [dict(r) for r in conn.execute(
            select(s.commands).where(s.commands.c.incident_id == incident_id).order_by(s.commands.c.ts)).mappings()]
        issued = {c["id"]: c["ts"] for c in commands}
        steps = [dict(r) for r in conn.execute(
            select(s.action_results).where(s.action_results.c.command_id.in_(list(issued)))
            .order_by(s.action_results.c.ts)).mappings()] if issued else []
    for step in steps:
        step["after_s"] = round(step["ts"] - issued[step["command_id"]], 3)
    return {**dict(row), "findings": findings, "decisions": decisions, "commands": commands, "steps": steps}
