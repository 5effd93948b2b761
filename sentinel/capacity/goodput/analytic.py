"""Closed forms for checkpointing a job that fails at random (domain.md, "Goodput").

Symbols: ``write_s`` (C) is the blocking time of one checkpoint write, ``mtbf_s`` (M) the job's mean time between
interruptions (``1 / (nodes x rate per node)``), ``recovery_s`` (R) what one interruption costs besides rework
(noticing it, rescheduling, loading the checkpoint, warming up).

- Young (1974): the lost-time-optimal interval sqrt(2·C·M).
- Daly (2006), first order: sqrt(2·C·(M + R)).
- Availability-optimal (Saxena et al., NVIDIA, 2024, arXiv 2410.18124): C + sqrt(2·(M + R)·C + C²), valid when
  the error-detection latency is small against the interval.
- Kokolis et al. (Meta, HPCA 2025, arXiv 2410.21680): E[ETTR] ≈ (1 − N·r_f·(u0 + Δt/2)) / (1 + C/Δt), with N the
  job's nodes, r_f the interruptions per node and second, u0 the time each interruption costs before work
  resumes (here: hang detection + restart) and Δt the checkpoint interval. A small-loss approximation: it treats
  every interruption as losing half an interval and ignores interruptions that land while the job is down.
"""

from __future__ import annotations

import math


def young_interval_s(write_s: float, mtbf_s: float) -> float:
    return math.sqrt(2.0 * write_s * mtbf_s)


def daly_interval_s(write_s: float, mtbf_s: float, recovery_s: float) -> float:
    return math.sqrt(2.0 * write_s * (mtbf_s + recovery_s))


def availability_optimal_interval_s(write_s: float, mtbf_s: float, recovery_s: float) -> float:
    return write_s + math.sqrt(2.0 * (mtbf_s + recovery_s) * write_s + write_s**2)


def kokolis_ettr(job_nodes: int, rate_per_node_s: float, lost_per_interruption_s: float, interval_s: float,
                 write_s: float) -> float:
    """Kokolis et al.'s expected ETTR, clipped to [0, 1] (the approximation goes negative when failures dominate)."""
    value = (1.0 - job_nodes * rate_per_node_s * (lost_per_interruption_s + interval_s / 2.0)) / \
        (1.0 + write_s / interval_s)
    return min(1.0, max(0.0, value))


def kokolis_best_interval_s(job_nodes: int, rate_per_node_s: float, write_s: float) -> float:
    """The interval that maximises Kokolis et al.'s expression: sqrt(2·C / (N·r_f)), Young's interval."""
    return young_interval_s(write_s, 1.0 / (job_nodes * rate_per_node_s)) if rate_per_node_s > 0 else math.inf
