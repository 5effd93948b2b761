"""Guards: small named checks that turn a disruptive action into observe-only, each with its reason.

A guard returns ``None`` to let the action through or a short reason to block it; every block is counted in
``sentinel_guard_blocks_total{guard=...}`` and written on the decision (``blocked_by``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sentinel.config import PolicyConfig
from sentinel.events import ActionKind


@dataclass(frozen=True)
class Proposal:
    node: str
    incident_id: str
    action: ActionKind


@dataclass(frozen=True)
class GuardContext:
    config: PolicyConfig
    now: float
    last_executed_ts: float | None  # last disruptive action carried out on this node
    drained_by: str | None  # incident id Sentinel drained this node for, if it is still held drained
    command_in_flight: str | None = None  # incident of a decided, unfinished command on this node


Guard = Callable[[Proposal, GuardContext], str | None]


def already_drained(p: Proposal, ctx: GuardContext) -> str | None:
    """Dedup: a node Sentinel already holds drained needs no second drain, whatever else it reports."""
    return f"node already drained by Sentinel for {ctx.drained_by}" if ctx.drained_by else None


def in_flight(p: Proposal, ctx: GuardContext) -> str | None:
    """Dedup before the result: a node with a drain decided and not yet finished gets no second one (two
    incidents opened for one node by two controllers during a rebalance, or a new incident racing the first)."""
    if ctx.command_in_flight and ctx.command_in_flight != p.incident_id:
        return f"a command for {ctx.command_in_flight} is already under way on this node"
    return None


def opt_out(p: Proposal, ctx: GuardContext) -> str | None:
    """Operators exclude nodes (under repair, benchmarks running) with ``policy.opt_out_nodes``."""
    return "node opted out (policy.opt_out_nodes)" if p.node in ctx.config.opt_out_nodes else None


def cooldown(p: Proposal, ctx: GuardContext) -> str | None:
    """At most one disruptive action per node per ``policy.cooldown_s`` (Draino waits 10 min between drains)."""
    if ctx.last_executed_ts is None:
        return None
    age = ctx.now - ctx.last_executed_ts
    if age < ctx.config.cooldown_s:
        return f"node acted on {age:.0f} s ago (cooldown {ctx.config.cooldown_s:.0f} s)"
    return None


def observe_only(p: Proposal, ctx: GuardContext) -> str | None:
    """The safe default: decisions are recorded, nothing is done, until ``policy.mode = "act"``."""
    return 'observe-only mode (set policy.mode = "act" to act)' if ctx.config.mode != "act" else None


GUARDS: dict[str, Guard] = {
    "dedup": already_drained,
    "in_flight": in_flight,
    "opt_out": opt_out,
    "cooldown": cooldown,
    "observe_only": observe_only,
}
