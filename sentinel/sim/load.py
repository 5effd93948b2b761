"""Simulated cluster load: a seeded GPU job queue with daily and weekly rhythm, as 10-minute load bins.

Jobs arrive as a Poisson process whose rate peaks in the afternoon (``daily_amplitude``) and drops at weekends
(``weekend_factor``); sizes are 1 to 16 GPUs, run times log-normal (median ``median_run_s``). The scheduler is
first-come-first-served with backfill: any pending job that fits in the free GPUs starts. Each bin records the
queue as it stands when the bin closes, the jobs submitted in it, and a utilisation near the busy share. The
demo writes two weeks of this before its simulated hour so ``sentinel forecast`` has a history to learn from.
"""

from __future__ import annotations

import math

import numpy as np

from sentinel.capacity.bins import ALL, BIN_S, LoadBin, PartitionLoad, QueueSnapshot, bin_start
from sentinel.sim.scheduler import SimScheduler

SIZES = np.array([1, 2, 4, 8, 16])
SIZE_P = np.array([0.35, 0.2, 0.2, 0.15, 0.1])


def simulate_load(capacity_gpus: int, start_ts: float, days: float, seed: int = 7, target_util: float = 0.8,
                  daily_amplitude: float = 0.6, weekend_factor: float = 0.5, median_run_s: float = 7200.0,
                  step_s: float = 60.0) -> list[LoadBin]:
    """Bins from ``start_ts`` (aligned down to a bin) for ``days`` days, partition ``all``."""
    rng = np.random.default_rng(seed)
    sigma = 1.0
    mean_run = median_run_s * math.exp(sigma**2 / 2)
    # mean GPU-seconds demanded per second at the average rate = target share of capacity
    base_rate = target_util * capacity_gpus / (float(SIZES @ SIZE_P) * mean_run)
    running: list[tuple[float, int]] = []  # (end ts, gpus)
    pending: list[tuple[float, int, float]] = []  # (submit ts, gpus, run s)
    bins: list[LoadBin] = []
    t = bin_start(start_ts)
    end = t + days * 86_400.0
    submitted = 0
    next_bin = t + BIN_S
    while t < end:
        t += step_s
        hour = (t % 86_400.0) / 3600.0
        weekend = ((t // 86_400.0) + 3) % 7 >= 5
        rate = base_rate * (1 + daily_amplitude * math.cos(2 * math.pi * (hour - 15.0) / 24.0))
        rate *= weekend_factor if weekend else 1.0
        for _ in range(rng.poisson(rate * step_s)):
            size = int(min(rng.choice(SIZES, p=SIZE_P), capacity_gpus))
            pending.append((t, size, float(rng.lognormal(math.log(median_run_s), sigma))))
            submitted += 1
        running = [(e, g) for e, g in running if e > t]
        free = capacity_gpus - sum(g for _, g in running)
        still = []
        for job in pending:
            if job[1] <= free:
                running.append((t + job[2], job[1]))
                free -= job[1]
            else:
                still.append(job)
        pending = still
        if t >= next_bin:
            busy = capacity_gpus - free
            util = min(1.0, max(0.0, busy / capacity_gpus * float(rng.normal(0.9, 0.03))))
            bins.append(LoadBin(ts=next_bin - BIN_S, partition=ALL, running_gpus=float(busy),
                                pending_gpus=float(sum(g for _, g, _ in pending)), submissions=submitted,
                                total_gpus=float(capacity_gpus), util=util, source="sim"))
            submitted = 0
            next_bin += BIN_S
    return bins


def snapshot_from_scheduler(scheduler: SimScheduler, gpus_per_node: int, ts: float) -> QueueSnapshot:
    """The simulated scheduler's queue as load (its jobs carry no submit time: submissions unknown)."""
    running = sum(j.size for j in scheduler.jobs.values() if j.state == "running") * gpus_per_node
    pending = sum(j.size for j in scheduler.jobs.values() if j.state == "pending") * gpus_per_node
    total = sum(1 for n in scheduler.nodes.values() if n.drain_reason is None) * gpus_per_node
    return QueueSnapshot(ts, {ALL: PartitionLoad(float(running), float(pending), float(total), None)})
