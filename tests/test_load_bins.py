"""Load bins: squeue --json parsed from literals (both JSON shapes), the recorder, and the store round trip."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import inspect

from sentinel.capacity.bins import ALL, LoadBin, LoadRecorder, series
from sentinel.capacity.bins_store import load_bins, partitions, record_load_bins
from sentinel.capacity.load.squeue import SqueueSource, job_gpus, parse_squeue
from sentinel.errors import ValidationError
from sentinel.events import GpuReading, TelemetrySample
from sentinel.store.engine import make_engine, upgrade
from sentinel.store.repository import Repository

# Slurm 22.05 shape (as on this machine): job_state a string, numbers plain, tres_per_node "gres:gpu:N"
SQUEUE_2205 = """{"meta": {"Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}}},
 "jobs": [
  {"job_id": 11, "job_state": "RUNNING", "partition": "gpu", "submit_time": 1000, "node_count": 2,
   "tres_per_node": "gres:gpu:8", "tres_alloc_str": "cpu=4,mem=1G,node=2,billing=4,gres/gpu=16",
   "tres_req_str": "cpu=4,mem=1G,node=2,billing=4,gres/gpu=16"},
  {"job_id": 12, "job_state": "PENDING", "partition": "gpu", "submit_time": 1300, "node_count": 1,
   "tres_per_node": "gres:gpu:4", "tres_alloc_str": "", "tres_req_str": "cpu=1,node=1,billing=1"},
  {"job_id": 13, "job_state": "PENDING", "partition": "debug,gpu", "submit_time": 1500, "node_count": 1,
   "tres_per_node": "", "tres_alloc_str": "", "tres_req_str": "cpu=1,node=1,gres/gpu:a100=2"},
  {"job_id": 14, "job_state": "COMPLETED", "partition": "gpu", "submit_time": 900,
   "tres_alloc_str": "gres/gpu=8"},
  {"job_id": 15, "job_state": "RUNNING", "partition": "cpu", "submit_time": 950, "tres_alloc_str": "cpu=2"}
 ]}"""

# Slurm 23.11+ shape: job_state a list, numbers as {"set", "infinite", "number"}, tres_per_job "gres/gpu:N"
SQUEUE_2311 = {"jobs": [
    {"job_id": 21, "job_state": ["RUNNING"], "partition": "gpu",
     "submit_time": {"set": True, "infinite": False, "number": 2000},
     "node_count": {"set": True, "infinite": False, "number": 1}, "tres_alloc_str": "cpu=8,gres/gpu=8"},
    {"job_id": 22, "job_state": ["PENDING"], "partition": "gpu",
     "submit_time": {"set": True, "infinite": False, "number": 2100},
     "node_count": {"set": True, "infinite": False, "number": 2}, "tres_per_node": "gres/gpu:4",
     "tres_req_str": "cpu=8,node=2"},
]}


def test_slurm_2205_queue_counts_running_and_pending_gpus_per_partition() -> None:
    snap = parse_squeue(SQUEUE_2205, ts=1800.0, capacity={"gpu": 64, "debug": 8, "cpu": 0})
    gpu, debug, total = snap.partitions["gpu"], snap.partitions["debug"], snap.partitions[ALL]
    assert (gpu.running_gpus, gpu.pending_gpus, gpu.total_gpus) == (16.0, 4.0, 64)
    assert (debug.running_gpus, debug.pending_gpus) == (0.0, 2.0)  # first partition named
    assert (total.running_gpus, total.pending_gpus, total.total_gpus) == (16.0, 6.0, 72)
    assert snap.partitions["cpu"].running_gpus == 0.0


def test_slurm_2311_numbers_and_per_node_gpus_times_nodes() -> None:
    snap = parse_squeue(SQUEUE_2311, ts=2400.0)
    assert snap.partitions["gpu"].running_gpus == 8.0 and snap.partitions["gpu"].pending_gpus == 8.0
    assert snap.partitions[ALL].total_gpus is None
    assert job_gpus({"tres_per_job": "gres/gpu:h100:32"}) == 32.0


@pytest.mark.parametrize(("data", "message"), [("{not json", "not JSON"), ('{"jobs": 3}', "'jobs' list"),
                                               ('{"jobs": [1]}', "not an object")])
def test_malformed_squeue_output_is_refused_with_the_reason(data: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        parse_squeue(data, ts=0.0)


def test_recorder_turns_a_snapshot_into_bins_with_submissions_and_utilisation() -> None:
    def sample(util: float) -> TelemetrySample:
        return TelemetrySample(node="n1", ts=1250.0, seq=1, gpus=[GpuReading(index=0, util_gpu_pct=util)])

    recorder = LoadRecorder(bin_s=600.0)
    recorder.observe([sample(50.0), sample(100.0)])
    bins = {b.partition: b for b in recorder.close(parse_squeue(SQUEUE_2205, ts=1800.0))}
    assert bins[ALL].ts == 1200.0 and bins[ALL].util == pytest.approx(0.75)
    # submitted inside [1200, 1800): job 12 at 1300 (gpu) and job 13 at 1500 (debug, its first partition)
    assert (bins[ALL].submissions, bins["gpu"].submissions, bins["debug"].submissions) == (2, 1, 1)
    assert bins["gpu"].util is None  # utilisation is cluster-wide
    assert recorder.close(parse_squeue(SQUEUE_2311, ts=2400.0))[0].util is None  # restarts each bin


def test_squeue_source_runs_squeue_json_as_an_argv_list() -> None:
    seen: list[list[str]] = []

    def runner(argv: list[str]) -> str:
        seen.append(argv)
        return json.dumps(SQUEUE_2311)

    snap = SqueueSource(runner).snapshot(2400.0)
    assert seen == [["squeue", "--json", "--all"]] and snap.partitions[ALL].running_gpus == 8.0


def test_bins_round_trip_through_the_store_and_a_rewrite_replaces(repo: Repository) -> None:
    record_load_bins(repo.engine, [LoadBin(600.0, ALL, 10, 2, 1, 64, 0.5, "squeue"),
                                   LoadBin(1800.0, ALL, 12, 0, None, 64, None, "squeue")])
    record_load_bins(repo.engine, [LoadBin(600.0, ALL, 11, 2, 1, 64, 0.5, "squeue")])
    got = load_bins(repo.engine, ALL)
    assert [(b.ts, b.running_gpus) for b in got] == [(600.0, 11.0), (1800.0, 12.0)]
    assert partitions(repo.engine) == {ALL: 2}
    cols = series(got)  # the missing bin at 1200 repeats the one before
    assert cols["ts"] == [600.0, 1200.0, 1800.0] and cols["running_gpus"] == [11.0, 11.0, 12.0]


def test_bad_bins_are_refused() -> None:
    with pytest.raises(ValidationError, match="running_gpus"):
        LoadBin(0.0, ALL, -1.0, 0.0)
    with pytest.raises(ValidationError, match="util"):
        LoadBin(0.0, ALL, 1.0, 0.0, util=1.5)


def test_migration_0003_adds_and_removes_the_load_tables(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    upgrade(engine, "0002")
    assert "load_bins" not in inspect(engine).get_table_names()
    upgrade(engine, "0003")
    assert {"load_bins", "forecasts"} <= set(inspect(engine).get_table_names())
    from alembic import command

    from sentinel.store.engine import _alembic_config

    command.downgrade(_alembic_config(engine), "0002")
    assert not {"load_bins", "forecasts"} & set(inspect(engine).get_table_names())
