"""``sentinel advise checkpoint``: a checkpoint interval for a job, from the interruptions the store recorded.

The rate of interruptions per node-day comes from the store's incidents that got a drain decision (any mode), over
the node-days the store has seen. When the history is shorter than ``PRIOR_NODE_DAYS``, the published Llama 3
rate (419 unexpected interruptions on 2,048 nodes in 54 days: 3.79 per 1,000 node-days, domain.md) is blended in
as a prior worth that many node-days, and the advice says so. The share of interruptions Sentinel caught ahead
(a checkpoint-and-drain decision rather than a drain after the failure) turns part of them into planned stops,
which cost a checkpoint write and a restart instead of hang detection, restart and half an interval of rework.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sentinel.capacity.goodput import analytic

LLAMA3_RATE_PER_1000_NODE_DAYS = 419 * 1000 / (2048 * 54)
PRIOR_NODE_DAYS = 1000.0


@dataclass(frozen=True)
class Inputs:
    job_gpus: int
    gpus_per_node: int
    write_s: float
    restart_s: float
    hang_s: float
    caught_ahead: float | None = None  # override of the share measured in the store


def advise(history: dict[str, Any], x: Inputs) -> dict[str, Any]:
    events = history["interruptions"]
    node_days = history["node_days"]
    count = len(events)
    if node_days >= PRIOR_NODE_DAYS:
        rate_per_day, source = count / node_days, "history"
    else:
        rate_per_day = (count + LLAMA3_RATE_PER_1000_NODE_DAYS / 1000 * PRIOR_NODE_DAYS) / (node_days + PRIOR_NODE_DAYS)
        source = (f"history ({node_days:.0f} node-days) blended with the Llama 3 prior "
                  f"({LLAMA3_RATE_PER_1000_NODE_DAYS:.2f} per 1,000 node-days, weighted as {PRIOR_NODE_DAYS:g} "
                  "node-days)")
    if x.caught_ahead is not None:
        share, share_source = x.caught_ahead, "given (--caught-ahead)"
    elif count:
        share, share_source = sum(e["ahead"] for e in events) / count, f"measured on {count} interruptions"
    else:
        share, share_source = 0.0, "no interruptions recorded: none assumed caught ahead"
    nodes = max(1, -(-x.job_gpus // x.gpus_per_node))
    rate_s = rate_per_day / 86_400.0
    mtbf = 1.0 / (nodes * rate_s) if rate_s > 0 else float("inf")
    recovery = x.hang_s + x.restart_s
    young = analytic.young_interval_s(x.write_s, mtbf)
    daly = analytic.daly_interval_s(x.write_s, mtbf, recovery)
    available = analytic.availability_optimal_interval_s(x.write_s, mtbf, recovery)
    # With proactive actions only the interruptions not caught ahead lose work: the interval follows their MTBF.
    mtbf_left = mtbf / (1.0 - share) if share < 1 else float("inf")
    proactive_interval = analytic.availability_optimal_interval_s(x.write_s, mtbf_left, recovery)
    without = analytic.kokolis_ettr(nodes, rate_s, recovery, available, x.write_s)
    with_actions = _ettr_with_actions(nodes, rate_s, share, x, proactive_interval)
    return {
        "job_gpus": x.job_gpus, "job_nodes": nodes, "interruptions_recorded": count,
        "by_kind": dict(Counter(e["kind"] for e in events).most_common()),
        "node_days_observed": round(node_days, 2),
        "rate_per_1000_node_days": round(rate_per_day * 1000, 3), "rate_source": source,
        "caught_ahead_share": round(share, 3), "caught_ahead_source": share_source,
        "job_mtbf_s": round(mtbf, 1),
        "young_interval_s": round(young, 1), "daly_interval_s": round(daly, 1),
        "availability_optimal_interval_s": round(available, 1),
        "recommended_interval_s": round(available, 1),
        "expected_ettr_reactive": round(without, 4),
        "recommended_interval_with_proactive_s": round(proactive_interval, 1),
        "expected_ettr_with_proactive": round(with_actions, 4),
    }


def _ettr_with_actions(nodes: int, rate_s: float, share: float, x: Inputs, interval_s: float) -> float:
    """Kokolis et al.'s expression with two kinds of stop: unexpected ones (hang + restart + half an interval of
    rework) and those caught ahead (a checkpoint write + restart)."""
    lost = nodes * rate_s * ((1 - share) * (x.hang_s + x.restart_s + interval_s / 2) +
                             share * (x.write_s + x.restart_s))
    return min(1.0, max(0.0, (1.0 - lost) / (1.0 + x.write_s / interval_s)))
