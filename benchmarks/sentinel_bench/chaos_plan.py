"""What ``sentinel-bench chaos`` does when, and how its outcome is scored: pure functions, tested with literals.

The plan, from a seed: fatal faults (Xid 79) on a set of nodes one at a time through the run, then a storm on
more nodes at once (the breaker must stop it at its limit), two nodes never faulted; and, interleaved, kill -9 of
the detector and of either controller (each restarted 1-3 s later), broker restarts and slurmctld restarts.

The score compares the scheduler's own record (the drains slurmctld logged, each job's restart count) and the
store with that ground truth.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

PROCESSES = ("detector", "controller-a", "controller-b")


@dataclass(frozen=True)
class Event:
    at_s: float  # seconds after the start
    kind: str  # fault | kill | broker | slurmctld
    target: str = ""  # the node (fault) or the process (kill)
    down_s: float = 0.0  # how long the process or service stays down


@dataclass(frozen=True)
class Plan:
    events: list[Event]
    isolated: list[str]  # nodes faulted one at a time
    storm: list[str]  # nodes faulted at once near the end: the breaker stops the drains at its limit
    healthy: list[str]  # never faulted: never drained
    breaker_limit: int


def make_plan(nodes: list[str], duration_s: float, seed: int, kills: int = 24, broker_restarts: int = 3,
              slurmctld_restarts: int = 2, max_fraction: float = 0.6) -> Plan:
    """A seeded plan over ``nodes`` (at least 3): about 40 % isolated faults, 40 % storm, at least one healthy."""
    if len(nodes) < 3:
        raise ValueError(f"the chaos plan needs at least 3 nodes, got {len(nodes)}")
    rng = random.Random(seed)
    shuffled = rng.sample(nodes, len(nodes))
    n_isolated = max(1, round(0.4 * len(nodes)))
    n_storm = min(max(1, round(0.4 * len(nodes))), len(nodes) - n_isolated - 1)
    isolated, storm = shuffled[:n_isolated], shuffled[n_isolated:n_isolated + n_storm]
    healthy = shuffled[n_isolated + n_storm:]
    events = [Event(round(duration_s * (0.1 + 0.55 * (i + rng.random()) / n_isolated), 1), "fault", node)
              for i, node in enumerate(isolated)]
    storm_at = round(duration_s * 0.75, 1)
    events += [Event(storm_at, "fault", node) for node in storm]
    events += [Event(round(rng.uniform(0.05, 0.9) * duration_s, 1), "kill", rng.choice(PROCESSES),
                     round(rng.uniform(1.0, 3.0), 1)) for _ in range(kills)]
    events += [Event(round(duration_s * (i + 1) / (broker_restarts + 1), 1), "broker", "", 2.0)
               for i in range(broker_restarts)]
    events += [Event(round(duration_s * (i + 0.6) / (slurmctld_restarts + 1), 1), "slurmctld", "", 3.0)
               for i in range(slurmctld_restarts)]
    limit = max(1, math.floor(max_fraction * len(nodes) + 1e-9))
    return Plan(sorted(events, key=lambda e: (e.at_s, e.kind)), isolated, storm, healthy, limit)


def score(plan: Plan, drains: dict[str, int], restarts: dict[str, int], found: set[str]) -> dict[str, int]:
    """The outcome against the plan.

    ``drains``: per node, how many times slurmctld recorded a drain with our reason; ``restarts``: per node, the
    restart count of the job pinned to it; ``found``: nodes with a fatal finding stored.
    """
    faulted = [*plan.isolated, *plan.storm]
    drained = {n for n, count in drains.items() if count}
    # The breaker admits the first `limit` faulted nodes the controllers judge, in whatever order chaos delivers
    # their findings: every faulted node is drained until the limit is reached, then none.
    expected = min(len(faulted), plan.breaker_limit)
    return {
        "faults": len(faulted),
        "drains_expected": expected,
        "drains_missing": max(0, expected - sum(1 for n in faulted if n in drained)),
        "drains_duplicated": sum(count - 1 for count in drains.values() if count > 1),
        "requeues_duplicated": sum(count - 1 for n, count in restarts.items() if n in drained and count > 1),
        "false_drains": sum(1 for n in drained if n not in faulted),
        "breaker_limit": plan.breaker_limit,
        "breaker_exceeded": max(0, len(drained) - plan.breaker_limit),
        "findings_lost": sum(1 for n in faulted if n not in found),
    }
