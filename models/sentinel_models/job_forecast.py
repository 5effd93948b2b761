"""Job-aware load forecasting: what the job table says about running and pending GPUs ``H`` seconds ahead.

A job table holds, per job, its submit time, start time (NaN: has not started, or never did), end time (NaN:
not yet) and GPUs, and optionally its time limit (seconds). At an origin ``T`` only what was known then is used:
jobs submitted by ``T``, whether they had started, whether they had ended.

``JobModel.fit(jobs, until)`` learns from the jobs seen before ``until`` (every duration still open at
``until`` counts as censored):
- run times: Kaplan-Meier survival (``models.job_survival``) of start -> end;
- queue waits: survival of submit -> leaving the queue (a start, or a withdrawal for jobs that never started),
  and the share of those exits that were starts;
- arrivals: GPUs submitted per 10-minute bin by hour of day and weekday/weekend;
- a fresh job's course: the GPU-weighted share of jobs running (and pending) ``d`` seconds after submit.

``JobModel.expect(jobs, T, H)`` turns the table at ``T`` into expected GPUs at ``T + H``: running jobs that
survive (probability ``S(age + H) / S(age)``, 0 past their time limit), pending jobs that stay queued, pending
jobs that start and still run (at the midpoint of the horizon), capped by the capacity that the survivors leave
free, and the learned arrivals' share running or pending at ``T + H``. These expectations are features of the
quantile model (``models.forecast_quantiles``), which turns them into p10/p50/p90 with the load's own history.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sentinel_models.calendar_features import BIN_S
from sentinel_models.job_survival import Survival

SLOTS = 48  # hour of day x (weekday, weekend)
FRESH_SAMPLE = 4000  # jobs that make a fresh job's course
FEATURES = ("survivors", "pending_stay", "pending_start", "arrivals_running", "arrivals_pending", "free")


@dataclass(frozen=True)
class Jobs:
    submit: np.ndarray
    start: np.ndarray  # NaN: not started (yet or ever)
    end: np.ndarray  # NaN: not ended (yet)
    gpus: np.ndarray
    limit: np.ndarray | None = None  # time limit in seconds (NaN or None: none known)

    def __len__(self) -> int:
        return len(self.submit)


def _inf(a: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(a), np.inf, a)


def load_at(jobs: Jobs, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Running and pending GPUs at each of ``times`` (a job runs in [start, end), queues in [submit, start or
    end)), by sorted events: O((jobs + times) log jobs)."""
    t = np.asarray(times, dtype=float)
    start, end, g = _inf(jobs.start), _inf(jobs.end), jobs.gpus

    def alive(begin: np.ndarray, stop: np.ndarray) -> np.ndarray:
        ob, os_ = np.argsort(begin), np.argsort(stop)
        cb = np.concatenate([[0.0], np.cumsum(g[ob])])
        cs = np.concatenate([[0.0], np.cumsum(g[os_])])
        return cb[np.searchsorted(begin[ob], t, side="right")] - cs[np.searchsorted(stop[os_], t, side="right")]

    queue_end = np.where(np.isfinite(start), start, end)
    return alive(start, np.where(np.isfinite(start), end, np.inf)), alive(jobs.submit, queue_end)


def slot(ts: np.ndarray) -> np.ndarray:
    ts = np.asarray(ts, dtype=float)
    weekend = ((np.floor(ts / 86_400.0) + 3) % 7) >= 5
    return (np.floor((ts % 86_400.0) / 3600.0).astype(int) + 24 * weekend).astype(int)


@dataclass
class JobModel:
    run: Survival
    wait: Survival
    start_share: float  # of the jobs leaving the queue, the share that started
    rate: np.ndarray  # GPUs submitted per bin, by slot
    fresh_d: np.ndarray  # seconds after submit
    fresh_running: np.ndarray  # GPU-weighted share running at fresh_d
    fresh_pending: np.ndarray
    capacity: float

    @classmethod
    def fit(cls, jobs: Jobs, until: float, capacity: float, first: float | None = None) -> JobModel:
        seen = jobs.submit < until
        start, end = _inf(jobs.start[seen]), _inf(jobs.end[seen])
        submit, g = jobs.submit[seen], jobs.gpus[seen]
        began = start < until
        run = Survival.fit(np.minimum(end[began], until) - start[began], end[began] <= until)
        leave = np.where(np.isfinite(start), start, end)
        left = leave <= until
        wait = Survival.fit(np.minimum(leave, until) - submit, left)
        start_share = float(began[left].mean()) if left.any() else 1.0
        first = float(np.min(submit)) if first is None else first
        bins = np.arange(np.floor(first / BIN_S), np.floor(until / BIN_S)) * BIN_S
        per_bin = np.bincount(np.searchsorted(bins, submit[submit >= first], side="right") - 1,
                              weights=g[submit >= first], minlength=len(bins))[:len(bins)]
        counts = np.bincount(slot(bins), minlength=SLOTS)
        rate = np.bincount(slot(bins), weights=per_bin, minlength=SLOTS) / np.maximum(counts, 1)
        d = np.arange(0.0, 86_400.0 + BIN_S, BIN_S / 2)
        old = np.nonzero(submit < until - 86_400.0)[0]  # their whole first day is in the record
        old = old[:: max(len(old) // FRESH_SAMPLE, 1)]  # an even sample is enough for two curves, and fast
        w = g[old] / max(float(g[old].sum()), 1e-9)
        s_old, st, en = submit[old][:, None], start[old][:, None], end[old][:, None]
        at = s_old + d[None, :]
        running = ((st <= at) & (at < en)).astype(float).T @ w
        pending = ((s_old <= at) & (at < np.where(np.isfinite(st), st, en))).astype(float).T @ w
        return cls(run, wait, start_share, rate, d, running, pending, capacity)

    def expect(self, jobs: Jobs, origin: float, horizon_s: float) -> np.ndarray:
        """The ``FEATURES`` (expected GPUs at ``origin + horizon_s``) from the table as known at ``origin``."""
        return self.expect_from(Table.at(jobs, origin), horizon_s)

    def expect_from(self, table: Table, horizon_s: float) -> np.ndarray:
        """``expect`` from a table already cut at its origin: several horizons share one cut."""
        origin, age = table.origin, table.age
        p_run = self.run.p_more(age, horizon_s)
        if table.limit is not None:
            p_run = np.where(np.isfinite(table.limit) & (age + horizon_s >= table.limit), 0.0, p_run)
        survivors = float(table.running_gpus @ p_run)
        stay = self.wait.p_more(table.waited, horizon_s)
        g = table.pending_gpus
        free = max(self.capacity - survivors, 0.0)
        starting = min(float(g @ ((1.0 - stay) * self.start_share)) * float(self.run(np.array(horizon_s / 2))), free)
        arrivals = origin + (np.arange(int(horizon_s // BIN_S)) + 0.5) * BIN_S
        lam = self.rate[slot(arrivals)]
        since = origin + horizon_s - arrivals
        arr_running = float(lam @ np.interp(since, self.fresh_d, self.fresh_running))
        arr_pending = float(lam @ np.interp(since, self.fresh_d, self.fresh_pending))
        return np.array([survivors, float(g @ stay), starting, arr_running, arr_pending, free])


@dataclass(frozen=True)
class Table:
    """The job table as known at ``origin``: the running jobs' ages, GPUs and time limits, and the pending jobs'
    waits and GPUs (small arrays: one pass over the whole table makes them)."""

    origin: float
    age: np.ndarray
    running_gpus: np.ndarray
    limit: np.ndarray | None
    waited: np.ndarray
    pending_gpus: np.ndarray

    @classmethod
    def at(cls, jobs: Jobs, origin: float) -> Table:
        open_ = (jobs.submit <= origin) & ~(jobs.end <= origin)
        started = jobs.start <= origin  # a start after the origin is not known yet
        running, pending = open_ & started, open_ & ~started
        return cls(origin, origin - jobs.start[running], jobs.gpus[running],
                   None if jobs.limit is None else jobs.limit[running], origin - jobs.submit[pending],
                   jobs.gpus[pending])
