"""``sentinel-bench forecast-fleet``: how long ``sentinel forecast`` takes on a large fleet's store.

Builds a SQLite store with N nodes x 8 GPUs, 14 days of load bins with a daily rhythm, and actionable findings
on 2 % of the nodes; then runs ``sentinel forecast --db STORE -o json`` as a fresh process each time (Python
start, imports, store reads, risk over every node, rendering: what a user waits for), ``runs`` times cold and
``runs`` times warm, and reports each wall time and the medians.

Cold: ``--refit``, the demand model is fitted in the command (scikit-learn imported, the fit, the model stored):
the first call on a store nobody fitted a model for. Warm: the stored model is fresh (the load recorder of
``sentinel controller`` / ``sentinel run`` refits it as bins arrive, or an earlier call did) and is evaluated
without scikit-learn. The goal (< 2 s) is judged on the warm median, the steady state; cold is reported beside.
``--job-table``: the store also holds a job table (8-GPU jobs filling the fleet, the bins derived from it), so
every call also fits the job model and replays it (``sentinel.capacity.forecast.job_quantiles``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sentinel.capacity.bins import ALL, LoadBin
from sentinel.capacity.bins_store import record_load_bins
from sentinel.events import Finding, FindingClass, GpuReading, Recommendation, Severity, TelemetrySample
from sentinel.store import schema
from sentinel.store.engine import make_engine, upgrade
from sentinel.store.repository import Repository
from sentinel_models.job_forecast import Jobs, load_at

GOAL_S = 2.0


def build_store(path: Path, nodes: int, now: float, with_jobs: bool = False) -> None:
    repo = Repository(make_engine(f"sqlite:///{path}"))
    upgrade(repo.engine)
    n = 14 * 144
    t = np.arange(n)
    cap = nodes * 8.0
    run = np.round(cap * (0.75 + 0.15 * np.sin(2 * np.pi * t / 144)))
    pend = np.round(cap * 0.05 * np.maximum(np.sin(2 * np.pi * t / 144), 0))
    first = now - 600.0 * n
    if with_jobs:  # the bins then come from the job table, as the recorder would have seen them
        run, pend = _job_table(repo, first, now, cap)
    record_load_bins(repo.engine, [LoadBin(first + 600.0 * i, ALL, float(run[i]), float(pend[i]), None, cap, 0.8,
                                           "sim") for i in range(n)])
    names = [f"gpu-node-{i:05d}" for i in range(nodes)]
    for start in range(0, nodes, 1000):
        repo.record_samples([TelemetrySample(node=name, ts=now, seq=1, gpus=[GpuReading(index=g) for g in range(8)])
                             for name in names[start:start + 1000]])
    rng = np.random.default_rng(0)
    for name in rng.choice(names, max(nodes // 50, 1), replace=False):
        repo.add_finding(Finding(id=f"f:{name}", node=str(name), ts=now - 600, observed_ts=now - 600,
                                 kind=FindingClass.GPU_ECC, rule="ecc-sbe-rate", severity=Severity.WARNING,
                                 recommendation=Recommendation.ALERT, confidence=float(rng.uniform(0.1, 0.9)),
                                 summary="correctable ECC errors climbing", evidence={"sbe_per_h": 40}), None)


def _job_table(repo: Repository, first: float, now: float, cap: float) -> tuple[np.ndarray, np.ndarray]:
    """8-GPU jobs filling about 75 % of the fleet with a daily rhythm (runs of 4 h on average, waits of 10 min),
    stored in ``queue_jobs`` as the recorder would have stored them by ``now``; the load bins they imply."""
    rng = np.random.default_rng(1)
    mean_run = 4 * 3600.0
    bins = np.arange(first - 86_400.0, now, 600.0)
    per_bin = rng.poisson(0.75 * cap / 8 / mean_run * 600.0 * (1 + 0.3 * np.sin(2 * np.pi * bins / 86_400.0)))
    submit = np.repeat(bins, per_bin) + rng.uniform(0, 600.0, int(per_bin.sum()))
    start = submit + rng.exponential(600.0, len(submit))
    end = start + rng.exponential(mean_run, len(submit))
    jobs = Jobs(submit, start, end, np.full(len(submit), 8.0))
    ts = first + 600.0 * np.arange(int(round((now - first) / 600.0)))
    running, pending = load_at(jobs, ts + 600.0)
    rows = [{"job_id": str(i), "partition": "gpu", "gpus": 8.0, "submit_ts": float(su), "first_seen_ts": float(su),
             "start_ts": float(st) if st <= now else None, "time_limit_s": None,
             "last_seen_ts": float(min(en, now)), "end_ts": float(en) if en <= now else None}
            for i, (su, st, en) in enumerate(zip(submit, start, end, strict=True)) if su <= now]
    with repo.engine.begin() as conn:
        conn.execute(schema.queue_jobs.insert(), rows)
    return np.minimum(running, cap), pending


def run_fleet_bench(nodes: int, runs: int = 3, progress: Callable[[str], None] | None = None,
                    with_jobs: bool = False) -> dict[str, Any]:
    say = progress or (lambda _text: None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fleet.db"
        say(f"building a store with {nodes} nodes")
        build_store(path, nodes, float(int(time.time()) // 600 * 600), with_jobs)
        cold = [_timed(path, ["--refit", "--save"], "fitted", say, f"cold run {i + 1}/{runs}") for i in range(runs)]
        warm = [_timed(path, [], "stored", say, f"warm run {i + 1}/{runs}") for i in range(runs)]
    median = statistics.median(warm)
    return {"nodes": nodes, "gpus": nodes * 8, "job_table": with_jobs, "cold_runs_s": [round(w, 2) for w in cold],
            "cold_median_s": round(statistics.median(cold), 2), "warm_runs_s": [round(w, 2) for w in warm],
            "median_s": round(median, 2), "goal_s": GOAL_S, "met": median < GOAL_S}


def _timed(path: Path, extra: list[str], expect: str, say: Callable[[str], None], what: str) -> float:
    say(f"sentinel forecast {what}")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sentinel.cli", "forecast", "--db", str(path), "-o", "json", *extra],
                          capture_output=True, text=True, timeout=300, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"sentinel forecast failed: {done.stderr.strip()[-500:]}")
    source = json.loads(done.stdout)["model"].get("source")
    if source != expect:  # a warm run that fitted (or the reverse) would time the wrong path
        raise RuntimeError(f"sentinel forecast {what}: model {source!r}, expected {expect!r}")
    return wall


def render_fleet(result: dict[str, Any]) -> str:
    verdict = "met" if result["met"] else "NOT met"
    return (f"sentinel forecast on {result['nodes']} nodes / {result['gpus']} GPUs, a fresh process per call:\n"
            f"  warm (stored model): median {result['median_s']} s (runs {', '.join(map(str, result['warm_runs_s']))}"
            f" s); goal < {result['goal_s']} s: {verdict}\n"
            f"  cold (--refit: fit in the call): median {result['cold_median_s']} s "
            f"(runs {', '.join(map(str, result['cold_runs_s']))} s)")
