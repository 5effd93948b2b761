"""``sentinel-bench forecast-jobs``: job-aware quantile forecasts of running and pending GPUs replayed from a job
trace, against persistence and seasonal naive with empirical change quantiles.

Protocol: the trace (``benchmarks.job_trace``) is cut into 10-minute bins from the day of its 1st-percentile
submission (a trace's first jobs can precede its busy part by months); each bin's value is the load when it
closes: GPUs of the jobs running, and of the jobs queued. The job model (``models.job_forecast``) learns run
times, waits and arrivals from what was known at the end of the first ``train_days``. The model's quantiles are
centred on the job model's expectation at each origin, rebuilt from the job table as known then: the quantile
models (``models.forecast_quantiles``), fitted on the training origins with the load's own history as features,
blended with the expectation plus its error quantiles on the training origins. Every later bin is a forecast
origin; scores and baselines as ``bench forecast`` (``benchmarks.quantile_tally``), same keys, targets
``running_gpu_num`` and ``pending_gpu_num``; ``job_table`` scores the expectation plus its error quantiles
alone (what ``sentinel forecast`` shows from a stored job table). The capacity (the scale of the features, and
the ceiling on pending jobs starting) is the peak of running GPUs in the training days unless given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sentinel.errors import ValidationError
from sentinel_bench.job_trace import read_jobs
from sentinel_bench.quantile_tally import Tally, baselines, render_quantiles
from sentinel_models.calendar_features import BIN_S, DAY, LOOKBACK, WEEK
from sentinel_models.forecast import LoadSeries
from sentinel_models.forecast_quantiles import QuantileModel, Rows, load_features
from sentinel_models.job_forecast import JobModel, Jobs, load_at
from sentinel_models.quantile_scores import HORIZONS as QHORIZONS
from sentinel_models.quantile_scores import QUANTILES, shifted

TARGETS = {"running_gpus": "running_gpu_num", "pending_gpus": "pending_gpu_num"}


def trace_series(jobs: Jobs, capacity: float | None = None, train_bins: int = 0) -> LoadSeries:
    """The trace's running and pending GPUs at the close of each 10-minute bin."""
    first = np.floor(np.quantile(jobs.submit, 0.01) / 86_400.0) * 86_400.0
    last = max(float(np.nanmax(jobs.end)) if np.isfinite(jobs.end).any() else 0.0, float(jobs.submit.max()))
    ts = first + np.arange(int((last - first) // BIN_S)) * BIN_S
    running, pending = load_at(jobs, ts + BIN_S)
    cap = capacity if capacity else max(float(running[:train_bins or None].max()), 1.0)
    return LoadSeries.build("trace", ts, capacity=np.full(len(ts), cap), running_gpus=running,
                            pending_gpus=pending)


def job_features(model: JobModel, jobs: Jobs, s: LoadSeries, origins: np.ndarray, h: int) -> np.ndarray:
    """Per origin: the job model's expectations at ``origin + h`` and the changes they imply, over capacity."""
    rows = np.array([model.expect(jobs, float(s.ts[k]) + BIN_S, h * BIN_S) for k in origins]).reshape(-1, 6)
    run, pend = s.columns["running_gpus"][origins], s.columns["pending_gpus"][origins]
    change_run = rows[:, 0] + rows[:, 2] + rows[:, 3] - run
    change_pend = rows[:, 1] + rows[:, 4] - pend
    return np.column_stack([rows, change_run, change_pend]) / model.capacity


def expected(target: str, jobx: np.ndarray, capacity: float) -> np.ndarray:
    """The job model's expected GPUs of ``target`` at origin + h (from ``job_features`` rows)."""
    x = jobx * capacity
    return np.maximum(x[:, 0] + x[:, 2] + x[:, 3] if target == "running_gpus" else x[:, 1] + x[:, 4], 0.0)


def _rows(s: LoadSeries, target: str, k: np.ndarray, h: int, jobx: np.ndarray, spread: np.ndarray) -> Rows:
    """Rows centred on the job model's expectation: the quantile models learn the truth's spread around it, and
    the baseline they are blended with is the expectation plus its empirical error quantiles in training."""
    X, scale = load_features(s, target, k, h)
    centre = expected(target, jobx, float(s.capacity[0]))
    return Rows(k, np.column_stack([X, jobx]), centre, scale, shifted(centre, spread), s.columns[target][k + h])


def run_forecast_jobs_bench(trace: Path, submit_col: str, start_col: str, end_col: str, gpus_col: str,
                            limit_col: str | None = None, train_days: float = 21.0, capacity: float | None = None,
                            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    say = progress or (lambda _text: None)
    started = time.perf_counter()
    say(f"reading {trace.name}")
    jobs = read_jobs(trace, submit_col, start_col, end_col, gpus_col, limit_col)
    train_end = int(round(train_days * DAY))
    if train_end < WEEK:
        raise ValidationError("--train-days must be at least 7 (the weekly baseline needs a week)")
    s = trace_series(jobs, capacity, train_end)
    if len(s) < train_end + max(QHORIZONS.values()) + 1:
        raise ValidationError(f"trace spans {len(s) * BIN_S / 86_400:.1f} days from its busy part: shorter than "
                              f"{train_days:g} days of training plus 24 h of test")
    until = float(s.ts[train_end - 1]) + BIN_S
    say(f"learning run times, waits and arrivals from {int((jobs.submit < until).sum())} jobs")
    model = JobModel.fit(jobs, until, float(s.capacity[0]), first=float(s.ts[0]))
    tally = Tally()
    for hname, h in QHORIZONS.items():
        say(f"rebuilding the job table at every origin for {hname}")
        train_k = np.arange(LOOKBACK, train_end - h)
        test_k = np.arange(train_end - 1, len(s) - h)
        train_x, test_x = job_features(model, jobs, s, train_k, h), job_features(model, jobs, s, test_k, h)
        for target, column in TARGETS.items():
            y = s.columns[target]
            spread = np.quantile(y[train_k + h] - expected(target, train_x, model.capacity), QUANTILES)
            qm = QuantileModel().fit([_rows(s, target, train_k, h, train_x, spread)])
            rows = _rows(s, target, test_k, h, test_x, spread)
            tally.add("model", column, hname, y[test_k + h], qm.predict(rows))
            tally.add("job_table", column, hname, y[test_k + h], rows.base)
            for name, q in baselines(y, test_k, h, train_end).items():
                tally.add(name, column, hname, y[test_k + h], q)
    summary = tally.summary()
    return {
        "trace": str(trace), "jobs": len(jobs), "days": round(len(s) * BIN_S / 86_400, 1), "train_days": train_days,
        "test_origins": int(len(s) - train_end), "capacity_gpus": float(s.capacity[0]),
        "model": summary["model"], "baselines": summary["baselines"], "goal": summary["goal"],
        "job_table": tally.scores("job_table"),
        "job_model": {"run_time_median_s": _median(model), "start_share": round(model.start_share, 3),
                      "gpus_submitted_per_bin": round(float(model.rate.mean()), 3)},
        "wall_s": round(time.perf_counter() - started, 1),
    }


def _median(model: JobModel) -> float | None:
    below = np.nonzero(model.run.surv <= 0.5)[0]
    return float(model.run.times[below[0]]) if below.size else None


def render_forecast_jobs(result: dict[str, Any]) -> str:
    lines = [f"job-aware forecast on {result['trace']}: {result['jobs']} jobs with GPUs, {result['days']} days "
             f"from the busy part, trained on the first {result['train_days']:g}, {result['test_origins']} test "
             f"origins, capacity {result['capacity_gpus']:g} GPUs ({result['wall_s']} s)", ""]
    lines += render_quantiles(result)
    job, last = result["job_table"]["pinball"], result["baselines"]["last"]["pinball"]
    lines += ["", "the job model's expectation with its training error quantiles alone (what `sentinel forecast` "
                  "shows from a job table), pinball vs last:"]
    lines += [f"  {t:<18}" + "  ".join(f"{h} {v:.3f} vs {last[t][h]:.3f}" for h, v in per.items())
              for t, per in job.items()]
    return "\n".join(lines)
