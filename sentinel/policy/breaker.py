"""The circuit breaker: at most ``max_fraction`` of the fleet acted on per sliding ``window_s``.

When an action would exceed the cap, the breaker opens and every later disruptive action is observe-only
until an operator runs ``sentinel breaker reset``. It never closes by itself: a storm of findings across the
fleet (a bad driver rollout, a telemetry outage) is more likely our problem than the hardware's.
State lives in the store so a restart cannot reset it. Judging is pure (``admission``): the controller reads the
state under the store's lock, judges, and writes the next state in the same transaction as the decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sentinel.config import BreakerConfig


@dataclass(frozen=True)
class BreakerState:
    """What the breaker remembers (the store persists it): open or closed, why and since when, and the nodes
    acted on inside the window as (time, node)."""

    is_open: bool
    reason: str
    changed_ts: float
    recent: list[tuple[float, str]]


CLOSED = BreakerState(False, "", 0.0, [])


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


def limit(config: BreakerConfig, fleet_size: int) -> int:
    """Nodes that may be acted on per window: the fraction of the fleet, but at least ``min_nodes`` (1 by
    default, so a small fleet can still lose a bad node; more for small partitions)."""
    return max(config.min_nodes, math.floor(config.max_fraction * fleet_size + 1e-9))


def admission(state: BreakerState, node: str, fleet_size: int, now: float, config: BreakerConfig,
              in_service: int | None = None) -> tuple[Verdict, BreakerState | None]:
    """The breaker's judgement, without I/O: the verdict on acting on ``node`` now and the new state (None when
    nothing changes). ``in_service``: nodes not held out by Sentinel now; taking one more below
    ``min_healthy`` is refused without opening the breaker (the fleet is thin, not misbehaving)."""
    if state.is_open:
        return Verdict(False, f"breaker open since {state.changed_ts:.0f}: {state.reason}"), None
    if config.min_healthy and in_service is not None and in_service - 1 < config.min_healthy:
        return Verdict(False, f"{in_service} nodes in service; acting would leave fewer than policy.breaker."
                              f"min_healthy ({config.min_healthy})"), None
    recent = [(ts, n) for ts, n in state.recent if ts > now - config.window_s]
    nodes = {n for _, n in recent}
    cap = limit(config, fleet_size)
    if node not in nodes and len(nodes) + 1 > cap:
        reason = (f"{len(nodes) + 1} nodes in {config.window_s:.0f} s would exceed the limit of {cap} "
                  f"({config.max_fraction:.0%} of {fleet_size} nodes)")
        return Verdict(False, f"breaker opened: {reason}"), BreakerState(True, reason, now, recent)
    return Verdict(True, ""), BreakerState(False, "", state.changed_ts, [*recent, (now, node)])


def reset(now: float, by: str = "operator") -> BreakerState:
    """The state after an operator's ``sentinel breaker reset``: closed, with an empty window; ``by`` names who."""
    return BreakerState(False, f"reset by {by}"[:200], now, [])
