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
from sentinel.store.unit import BreakerRow


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


def limit(config: BreakerConfig, fleet_size: int) -> int:
    """Nodes that may be acted on per window; at least one, so a small fleet can still lose a bad node."""
    return max(1, math.floor(config.max_fraction * fleet_size + 1e-9))


def admission(state: BreakerRow, node: str, fleet_size: int, now: float,
              config: BreakerConfig) -> tuple[Verdict, BreakerRow | None]:
    """The breaker's judgement, without I/O: the verdict on acting on ``node`` now and the new state (None when
    nothing changes: the breaker is already open)."""
    if state.is_open:
        return Verdict(False, f"breaker open since {state.changed_ts:.0f}: {state.reason}"), None
    recent = [(ts, n) for ts, n in state.recent if ts > now - config.window_s]
    nodes = {n for _, n in recent}
    cap = limit(config, fleet_size)
    if node not in nodes and len(nodes) + 1 > cap:
        reason = (f"{len(nodes) + 1} nodes in {config.window_s:.0f} s would exceed the limit of {cap} "
                  f"({config.max_fraction:.0%} of {fleet_size} nodes)")
        return Verdict(False, f"breaker opened: {reason}"), BreakerRow(True, reason, now, recent)
    return Verdict(True, ""), BreakerRow(False, "", state.changed_ts, [*recent, (now, node)])


def reset(now: float) -> BreakerRow:
    """The state after an operator's ``sentinel breaker reset``: closed, with an empty window."""
    return BreakerRow(False, "reset by operator", now, [])
