"""The job table: squeue's GPU jobs parsed with their times and limits, kept across snapshots (a job that is
no longer listed has ended), read back as the job model's arrays, and the migration that adds it."""

from __future__ import annotations

import math

from sqlalchemy import inspect

from sentinel.load.squeue import parse_squeue
from sentinel.store.engine import _alembic_config, make_engine, upgrade
from sentinel.store.queue_jobs import job_count, job_table, record_jobs
from sentinel.store.repository import Repository


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
    started = {**PENDING, "job_state": ["RUNNING"], "start_time": _num(2000), "tres_alloc_str": "gres/gpu=2"}
    for ts, queue in ((1800.0, _queue(RUNNING, PENDING)), (2400.0, _queue(started)), (3000.0, _queue())):
        snap = parse_squeue(queue, ts=ts)
        assert snap.jobs is not None
        record_jobs(repo.engine, snap.ts, snap.jobs)
    assert job_count(repo.engine) == 2
    jobs = job_table(repo.engine)
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
