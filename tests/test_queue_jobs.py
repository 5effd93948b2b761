"""The job table: squeue's GPU jobs parsed with their times and limits, kept across snapshots (a job that is
no longer listed has ended), read back as the job model's arrays, and the migration that adds it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect

from sentinel.capacity.jobs_store import job_count, job_table, record_jobs
from sentinel.capacity.load.squeue import parse_squeue
from sentinel.store.engine import _alembic_config, make_engine, upgrade
from sentinel.store.repository import Repository
from tests.pg import empty_postgres


def _num(n: float) -> dict[str, object]:
    return {"set": True, "infinite": False, "number": n}


def _queue(*jobs: dict[str, object]) -> dict[str, object]:
    return {"jobs": list(jobs)}


RUNNING = {"job_id": 31, "job_state": ["RUNNING"], "partition": "gpu", "submit_time": _num(1000),
           "start_time": _num(1100), "time_limit": _num(120), "tres_alloc_str": "cpu=8,gres/gpu=8"}
PENDING = {"job_id": 32, "job_state": ["PENDING"], "partition": "gpu", "submit_time": _num(1500),
           "start_time": _num(9999), "time_limit": {"set": True, "infinite": True, "number": 0},
           "tres_req_str": "cpu=2,gres/gpu=2"}
CPU_ONLY = {"job_id": 33, "job_state": ["RUNNING"], "partition": "cpu", "submit_time": _num(900),
            "tres_alloc_str": "cpu=2"}


def test_squeue_lists_gpu_jobs_with_start_only_when_running_and_the_limit_in_seconds() -> None:
    snap = parse_squeue(_queue(RUNNING, PENDING, CPU_ONLY), ts=1800.0)
    assert snap.jobs is not None
    by_id = {j.job_id: j for j in snap.jobs}
    assert set(by_id) == {"31", "32"}  # the CPU-only job holds no GPU
    assert (by_id["31"].gpus, by_id["31"].start_ts, by_id["31"].time_limit_s) == (8.0, 1100.0, 7200.0)
    # a pending job's start_time is Slurm's estimate, not a start; an infinite limit is no limit
    assert (by_id["32"].gpus, by_id["32"].start_ts, by_id["32"].time_limit_s) == (2.0, None, None)


def test_jobs_are_kept_across_snapshots_and_end_when_no_longer_listed(repo: Repository) -> None:
    _assert_kept_and_ended(repo.engine)


@pytest.mark.postgres
def test_the_job_table_reads_back_the_same_on_postgres(pg_url: str) -> None:
    """``job_table`` reads the driver's rows directly (floats and None): psycopg's must become the same arrays."""
    engine = empty_postgres(pg_url)
    upgrade(engine)
    _assert_kept_and_ended(engine)


def _assert_kept_and_ended(engine: Engine) -> None:
    started = {**PENDING, "job_state": ["RUNNING"], "start_time": _num(2000), "tres_alloc_str": "gres/gpu=2"}
    for ts, queue in ((1800.0, _queue(RUNNING, PENDING)), (2400.0, _queue(started)), (3000.0, _queue())):
        snap = parse_squeue(queue, ts=ts)
        assert snap.jobs is not None
        record_jobs(engine, snap.ts, snap.jobs)
    assert job_count(engine) == 2
    jobs = job_table(engine)
    order = list(jobs.submit)
    first, second = order.index(1000.0), order.index(1500.0)
    assert (jobs.start[first], jobs.end[first], jobs.limit is not None and jobs.limit[first]) == (1100.0, 2400.0,
                                                                                                   7200.0)
    assert (jobs.start[second], jobs.end[second], jobs.gpus[second]) == (2000.0, 3000.0, 2.0)
    assert jobs.limit is not None and math.isnan(jobs.limit[second])


def test_migration_0009_adds_and_removes_the_job_table(sqlite_url: str) -> None:
    from alembic import command

    engine = make_engine(sqlite_url)
    upgrade(engine, "0008")
    assert "queue_jobs" not in inspect(engine).get_table_names()
    upgrade(engine, "0009")
    assert "queue_jobs" in inspect(engine).get_table_names()
    command.downgrade(_alembic_config(engine), "0008")
    assert "queue_jobs" not in inspect(engine).get_table_names()


def test_forecast_takes_its_quantiles_from_the_job_table_when_it_has_enough(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A steady stream: a 2-GPU job every 30 min running 2 h, so 8 GPUs run at any time (after the first 2 h)."""
    import json

    import numpy as np

    from sentinel.capacity.bins import ALL, LoadBin
    from sentinel.capacity.bins_store import record_load_bins
    from sentinel.cli.main import main
    from sentinel.store import schema
    from sentinel_models.job_forecast import Jobs, load_at

    start, days = 1_767_225_600.0, 3
    path = tmp_path / "s.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    submit = np.arange(start, start + days * 86_400.0, 1800.0)
    jobs = Jobs(submit, submit + 60.0, submit + 60.0 + 7200.0, np.full(len(submit), 2.0))
    ts = start + np.arange(days * 144) * 600.0
    running, pending = load_at(jobs, ts + 600.0)
    record_load_bins(engine, [LoadBin(float(t), ALL, float(r), float(p), None, 32.0, None, "squeue")
                              for t, r, p in zip(ts, running, pending, strict=True)])
    now = float(ts[-1]) + 600.0
    with engine.begin() as conn:
        conn.execute(schema.queue_jobs.insert(), [
            {"job_id": str(i), "partition": "gpu", "gpus": 2.0, "submit_ts": float(s), "start_ts": float(s) + 60.0,
             "time_limit_s": None, "first_seen_ts": float(s), "last_seen_ts": min(float(s) + 7260.0, now),
             "end_ts": float(s) + 7260.0 if s + 7260.0 <= now else None} for i, s in enumerate(submit)])
    assert main(["forecast", "--db", str(path), "-o", "json", "--horizon", "6h"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["quantiles_from"].startswith("job table (144 jobs")
    assert report["inputs"].startswith("job table") and "aggregate load bins" in report["inputs"]
    q = report["quantiles"]["running_gpus"]
    assert set(q) == {"1h", "3h", "6h"}
    assert all(v["p10"] <= v["p50"] <= v["p90"] for v in q.values())
    assert 6.0 <= q["1h"]["p50"] <= 10.0 and 6.0 <= q["6h"]["p50"] <= 10.0


def test_retention_drops_jobs_that_ended_before_the_cutoff_and_keeps_open_ones(repo: Repository) -> None:
    from sentinel.config import from_mapping
    from sentinel.controller.housekeeping import DAY_S, cutoffs
    from sentinel.store.retention import prune

    now = 100 * DAY_S
    record_jobs(repo.engine, now - 40 * DAY_S, parse_squeue(_queue(RUNNING, PENDING), ts=0.0).jobs or ())
    record_jobs(repo.engine, now - 39 * DAY_S, parse_squeue(_queue(PENDING), ts=0.0).jobs or ())  # 31 ended
    kept = cutoffs(from_mapping({}).store.retention, now)
    assert kept.queue_jobs == now - 30 * DAY_S
    assert prune(repo.engine, kept, now).get("queue_jobs") == 1
    assert job_count(repo.engine) == 1  # the pending job has not ended: it stays
