"""The circuit breaker: at most ``max_fraction`` of the fleet acted on per sliding ``window_s``.

When an action would exceed the cap, the breaker opens and every later disruptive action is observe-only
until an operator runs ``sentinel breaker reset``. It never closes by itself: a storm of findings across the
fleet (a bad driver rollout, a telemetry outage) is more likely our problem than the hardware's.
State lives in the store so a restart cannot reset it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sentinel.config import BreakerConfig
from sentinel.metrics import Metrics
from sentinel.store.repository import BreakerRow, Repository


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


class Breaker:
    def __init__(self, repo: Repository, config: BreakerConfig, metrics: Metrics) -> None:
        self.repo = repo
        self.config = config
        self.metrics = metrics

    def state(self) -> BreakerRow:
        return self.repo.load_breaker() or BreakerRow(False, "", 0.0, [])

    def limit(self, fleet_size: int) -> int:
        return limit(self.config, fleet_size)

    def admit(self, node: str, fleet_size: int, now: float) -> Verdict:
        """Count ``node`` against the window if it fits; otherwise open the breaker and refuse. Read, decision
        and write happen under the store's breaker lock (``Repository.update_breaker``), so two controllers
        cannot both take the last place."""
        verdict = self.repo.update_breaker(lambda state: admission(state, node, fleet_size, now, self.config))
        self.metrics.breaker_open.set(0 if verdict.allowed else 1)
        return verdict

    def reset(self, now: float) -> BreakerRow:
        """Close the breaker and forget the window (operator action)."""
        row = BreakerRow(False, "reset by operator", now, [])
        self.repo.save_breaker(row)
        self.metrics.breaker_open.set(0)
        return row
