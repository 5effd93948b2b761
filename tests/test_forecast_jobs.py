"""Job-aware forecasting: survival from finished jobs, the load a job table implies, the job model's
expectations, and ``sentinel-bench forecast-jobs`` on a small generated trace (written here)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from sentinel_bench.cli import main as bench_main
from sentinel_models.job_forecast import JobModel, Jobs, Table, load_at
from sentinel_models.job_survival import Survival

NAN = float("nan")


def test_kaplan_meier_counts_censored_jobs_as_at_risk_until_they_leave() -> None:
    # run times 10, 20 (ended), 30 (still running), 40 (ended)
    s = Survival.fit(np.array([10.0, 20.0, 30.0, 40.0]), np.array([True, True, False, True]))
    assert s(np.array([5.0, 10.0, 25.0, 40.0])).tolist() == pytest.approx([1.0, 0.75, 0.5, 0.0])
    # a job 25 s in: S(35) / S(25) = 0.5 / 0.5 = 1; one 100 s in is older than any that ended: it goes on
    assert s.p_more(np.array([25.0, 100.0]), 10.0).tolist() == pytest.approx([1.0, 1.0])
    assert s.p_more(np.array([15.0]), 30.0)[0] == pytest.approx(0.0 / 0.75)


def test_load_at_counts_running_and_queued_gpus_and_never_started_jobs_as_queued_until_withdrawn() -> None:
    jobs = Jobs(submit=np.array([0.0, 0.0, 50.0]), start=np.array([10.0, NAN, 60.0]),
                end=np.array([100.0, 30.0, NAN]), gpus=np.array([4.0, 2.0, 1.0]))
    running, pending = load_at(jobs, np.array([5.0, 20.0, 55.0, 200.0]))
    assert running.tolist() == [0.0, 4.0, 4.0, 1.0]
    assert pending.tolist() == [6.0, 2.0, 1.0, 0.0]


def test_job_model_expects_survivors_by_age_and_zero_past_the_time_limit() -> None:
    # history: 1-GPU jobs that each ran exactly 3600 s, one submitted every 10 minutes, no wait
    submit = np.arange(0.0, 3 * 86_400.0, 600.0)
    hist = Jobs(submit, submit.copy(), submit + 3600.0, np.ones(len(submit)))
    model = JobModel.fit(hist, until=3 * 86_400.0, capacity=10.0)
    assert model.start_share == 1.0
    assert model.rate == pytest.approx(np.where(model.rate > 0, 1.0, 0.0))  # one GPU submitted per bin
    origin = 4 * 86_400.0
    now = Jobs(np.array([origin - 1800.0, origin - 600.0]), np.array([origin - 1800.0, origin - 600.0]),
               np.array([NAN, NAN]), np.array([8.0, 2.0]), limit=np.array([NAN, 900.0]))
    e = model.expect(now, origin, 1200.0)
    # the 8-GPU job is 30 min in and every job runs 60 min: it survives 20 more; the other hits its limit
    assert e[0] == pytest.approx(8.0)
    assert e[5] == pytest.approx(2.0)  # free capacity left by the survivors


def test_table_cut_at_an_origin_knows_only_what_had_happened_by_then() -> None:
    """Running: started by the origin and not ended; pending: submitted, not started by then (a later start is
    not known yet), not withdrawn; ended or not yet submitted jobs are in neither."""
    jobs = Jobs(submit=np.array([0.0, 0.0, 10.0, 20.0, 90.0, 0.0]), start=np.array([5.0, 60.0, NAN, 10.0, 95.0, 1.0]),
                end=np.array([NAN, 80.0, NAN, 40.0, NAN, 50.0]), gpus=np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0]),
                limit=np.array([100.0, NAN, NAN, NAN, NAN, NAN]))
    t = Table.at(jobs, 50.0)
    assert t.running_gpus.tolist() == [1.0] and t.age.tolist() == [45.0] and t.limit is not None
    assert t.limit.tolist() == [100.0]
    assert t.pending_gpus.tolist() == [2.0, 4.0] and t.waited.tolist() == [50.0, 40.0]
    model = JobModel.fit(Jobs(np.arange(0.0, 86_400.0, 600.0), np.arange(0.0, 86_400.0, 600.0),
                              np.arange(0.0, 86_400.0, 600.0) + 1800.0, np.ones(144)), until=86_400.0, capacity=8.0)
    for horizon in (600.0, 3600.0):  # one cut serves every horizon
        assert model.expect_from(t, horizon).tolist() == model.expect(jobs, 50.0, horizon).tolist()


def _write_trace(path: Path, days: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lines = ["name,t_submit,t_start,t_end,n_gpu"]
    t = 0.0
    i = 0
    while t < days * 86_400.0:
        hour = (t % 86_400.0) / 3600.0
        t += rng.exponential(900.0 if 8 <= hour < 20 else 3600.0)  # a daily rhythm of arrivals
        wait = rng.exponential(300.0)
        run = rng.exponential(5400.0)
        never = rng.random() < 0.05
        start = "" if never else f"{t + wait:.0f}"
        lines.append(f"job{i},{t:.0f},{start},{t + wait + (0 if never else run):.0f},{rng.integers(1, 5)}")
        i += 1
    with gzip.open(path, "wt") as fh:
        fh.write("\n".join(lines) + "\n")


def test_bench_forecast_jobs_replays_a_trace_with_named_columns(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "jobs.csv.gz"
    _write_trace(trace, 10, 3)
    assert bench_main(["forecast-jobs", "--trace", str(trace), "--submit-col", "t_submit", "--start-col", "t_start",
                       "--end-col", "t_end", "--gpus-col", "n_gpu", "--train-days", "7", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for target in ("running_gpu_num", "pending_gpu_num"):
        assert set(result["model"]["pinball"][target]) == {"1h", "3h", "6h", "24h"}
        assert set(result["baselines"]["last"]["pinball"][target]) == {"1h", "3h", "6h", "24h"}
        assert all(0.0 <= c <= 1.0 for c in result["model"]["coverage80"][target].values())
        assert set(result["job_table"]["pinball"][target]) == {"1h", "3h", "6h", "24h"}
    assert result["job_model"]["start_share"] == pytest.approx(0.95, abs=0.03)
    assert 3000 < result["job_model"]["run_time_median_s"] < 5000  # exponential, mean 5400 s: median 3743 s


def test_bench_forecast_jobs_names_a_missing_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text("submit,start,end,gpus\n0,1,2,1\n")
    assert bench_main(["forecast-jobs", "--trace", str(trace), "--gpus-col", "num_gpu"]) == 1
    assert "no column num_gpu" in capsys.readouterr().err
