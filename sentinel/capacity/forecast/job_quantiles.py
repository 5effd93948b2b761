"""Quantiles from the job table for ``sentinel forecast``: the job model's expected running and pending GPUs at
1 h, 3 h, 6 h and 24 h, with p10 and p90 from that expectation's own errors on the recorded past.

The job model (``models.job_forecast``) is fitted on the jobs recorded in the last 8 days; it is then replayed at
origins every 3 h over the past week of load bins, each from the job table as it was known then, and the 10 %, 50 % and
90 % quantiles of (truth - expectation) there shift today's expectation. The origins lie on one 3-hour grid back
from now for every horizon (each horizon uses those at least its length back), so each cut of the job table
(``models.job_forecast.Table``, one pass over every job) serves all four horizons. This is the baseline that
``sentinel-bench forecast-jobs`` blends its gradient-boosted quantiles with (docs/benchmarks.md); it needs only
numpy, so the command stays fast. Too little recorded (fewer than ``MIN_ENDED`` ended jobs or a day of bins):
None and the reason (no job at all: no reason), and the forecast uses the aggregate bins alone.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import Engine

from sentinel.capacity.bins import ALL, BIN_S
from sentinel.capacity.jobs_store import job_table
from sentinel_models.calendar_features import DAY
from sentinel_models.forecast import LoadSeries
from sentinel_models.job_forecast import JobModel, Jobs, Table
from sentinel_models.quantile_scores import HORIZONS, QUANTILES

MIN_ENDED = 20
PAST_BINS = 7 * DAY
EVERY = 18  # replay origins three hours apart (56 a week: enough for three quantiles, and fast)


def job_quantiles(engine: Engine, partition: str, s: LoadSeries,
                  horizon_bins: int) -> tuple[dict[str, dict[str, dict[str, float]]] | None, str]:
    """``({target: {horizon: {p10, p50, p90}}}, what was used)`` or ``(None, why not)``."""
    now = float(s.ts[-1]) + BIN_S  # each bin holds the queue as it stood when it closed
    # the jobs that matter to the replayed week: those open at its start or later (and they teach the run times)
    jobs = job_table(engine, None if partition == ALL else partition, now - (PAST_BINS + DAY) * BIN_S)
    ended = int(np.isfinite(jobs.end).sum())
    if not len(jobs):
        return None, ""
    if ended < MIN_ENDED or len(s) < DAY:
        return None, (f"job table: {len(jobs)} jobs recorded, {ended} ended; the job-aware quantiles need "
                      f"{MIN_ENDED} ended jobs and a day of load bins")
    capacity = max(float(np.nanmax(s.capacity)), float(np.max(s.columns["running_gpus"])), 1.0)
    model = JobModel.fit(jobs, now, capacity, first=float(s.ts[max(0, len(s) - 4 * 7 * DAY)]))
    out: dict[str, dict[str, dict[str, float]]] = {}
    tables: dict[int, Table] = {}  # origin bin (-1: now) -> the job table cut there
    grid = np.arange(len(s) - 1 - EVERY, DAY - 1, -EVERY)  # replay origins, shared by every horizon
    for name, h in HORIZONS.items():
        if h > horizon_bins:
            continue
        past = grid[(grid <= len(s) - 1 - h) & (grid >= len(s) - 1 - h - PAST_BINS)]
        for target, expect_now, expect_past in _expectations(model, jobs, s, now, h, past, tables):
            truth = s.columns[target][past + h]
            spread = (np.quantile(truth - expect_past, QUANTILES) if len(past) >= 12 else np.zeros(3))
            q = np.sort(np.maximum(expect_now + spread, 0.0))
            out.setdefault(target, {})[name] = {f"p{int(level * 100)}": round(float(v), 2)
                                                for level, v in zip(QUANTILES, q, strict=True)}
    return out, f"job table ({len(jobs)} jobs, {ended} ended)"


def _expectations(model: JobModel, jobs: Jobs, s: LoadSeries, now: float, h: int, past: np.ndarray,
                  tables: dict[int, Table]) -> list[tuple[str, float, np.ndarray]]:
    def both(k: int) -> tuple[float, float]:
        if k not in tables:
            tables[k] = Table.at(jobs, now if k < 0 else float(s.ts[k]) + BIN_S)
        e = model.expect_from(tables[k], h * BIN_S)
        return e[0] + e[2] + e[3], e[1] + e[4]

    current = both(-1)
    history = np.array([both(int(k)) for k in past]).reshape(-1, 2)
    return [("running_gpus", current[0], history[:, 0]), ("pending_gpus", current[1], history[:, 1])]
