"""Slurm's queue as load: a pure parser of ``squeue --json`` and a source that runs it (argv only, no shell).

Both JSON shapes in the field are read: Slurm 22.05 (``job_state`` a string, times and counts plain numbers,
``tres_per_node`` like ``gres:gpu:8``) and 23.02+ (``job_state`` a list, numbers as ``{"set", "infinite",
"number"}``, ``gres/gpu:8``). A job's GPUs come from ``tres_alloc_str`` when allocated, else ``tres_req_str``,
else ``tres_per_job`` / ``tres_per_node`` x nodes. A pending job that names several partitions counts in the
first. Jobs that started and ended between two snapshots are invisible to ``squeue``, so ``submissions``
undercounts short jobs. The snapshot also lists every GPU job (id, partition, GPUs, submit and start times, time
limit): the job table ``sentinel.capacity.jobs_store`` keeps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from sentinel.capacity.bins import ALL, PartitionLoad, QueueJob, QueueSnapshot
from sentinel.errors import ValidationError
from sentinel.slurm_cli import SlurmCli

RUNNING = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SUSPENDED"})
PENDING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu(?::[^=,]+)?=(\d+)")
_PER_GPU = re.compile(r"gres[:/]gpu(?::[A-Za-z0-9_.-]+)?[:=](\d+)")

Runner = Callable[[list[str]], str]


def _number(value: Any) -> float | None:
    """A Slurm number: plain, or 23.02+'s {"set": true, "infinite": false, "number": N}."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _state(job: Mapping[str, Any]) -> str:
    state = job.get("job_state", "")
    if isinstance(state, list):
        state = state[0] if state else ""
    return str(state).upper()


def job_gpus(job: Mapping[str, Any]) -> float:
    """GPUs a job holds (allocated) or asks for (requested), 0 when it asks for none."""
    for key in ("tres_alloc_str", "tres_req_str"):
        match = _TRES_GPU.search(str(job.get(key) or ""))
        if match:
            return float(match.group(1))
    per_job = _PER_GPU.search(str(job.get("tres_per_job") or ""))
    if per_job:
        return float(per_job.group(1))
    per_node = _PER_GPU.search(str(job.get("tres_per_node") or ""))
    if per_node:
        nodes = _number(job.get("node_count")) or 1.0
        return float(per_node.group(1)) * nodes
    return 0.0


def parse_squeue(data: str | bytes | Mapping[str, Any], ts: float,
                 capacity: Mapping[str, float] | None = None) -> QueueSnapshot:
    """The queue seen by ``squeue --json`` at ``ts``, per partition plus ``ALL``; ``capacity`` (GPUs per
    partition, e.g. from sinfo) fills ``total_gpus``. Malformed JSON raises ``ValidationError`` with the reason."""
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"squeue --json: not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("jobs"), list):
        raise ValidationError("squeue --json: expected an object with a 'jobs' list")
    acc: dict[str, dict[str, Any]] = {}
    jobs: list[QueueJob] = []
    for job in data["jobs"]:
        if not isinstance(job, Mapping):
            raise ValidationError("squeue --json: a job is not an object")
        state = _state(job)
        if state not in RUNNING and state not in PENDING:
            continue
        partition = str(job.get("partition") or "default").split(",")[0]
        gpus = job_gpus(job)
        submit = _number(job.get("submit_time"))
        if gpus > 0 and job.get("job_id") is not None:
            jobs.append(_job(job, partition, gpus, submit, state in RUNNING))
        for name in (partition, ALL):
            slot = acc.setdefault(name, {"running": 0.0, "pending": 0.0, "submits": []})
            slot["running" if state in RUNNING else "pending"] += gpus
            if submit is not None:
                slot["submits"].append(submit)
    capacity = dict(capacity or {})
    if capacity and ALL not in capacity:
        capacity[ALL] = sum(capacity.values())
    acc.setdefault(ALL, {"running": 0.0, "pending": 0.0, "submits": []})
    return QueueSnapshot(ts=ts, partitions={
        name: PartitionLoad(running_gpus=v["running"], pending_gpus=v["pending"], total_gpus=capacity.get(name),
                            submit_ts=tuple(v["submits"]))
        for name, v in acc.items()
    }, jobs=tuple(jobs))


def _job(job: Mapping[str, Any], partition: str, gpus: float, submit: float | None, running: bool) -> QueueJob:
    limit = _number(job.get("time_limit"))  # minutes; unset or infinite: None
    start = _number(job.get("start_time")) if running else None
    return QueueJob(str(job["job_id"]), partition, gpus, submit, start, None if limit is None else limit * 60.0)


def _run(argv: list[str]) -> str:
    return SlurmCli(timeout_s=30.0).text(argv, ValidationError)


class SqueueSource:
    """Reads the live queue with ``squeue --json`` (the runner is injectable; production runs the binary)."""

    def __init__(self, runner: Runner = _run, capacity: Mapping[str, float] | None = None) -> None:
        self.runner = runner
        self.capacity = capacity

    def snapshot(self, ts: float) -> QueueSnapshot:
        return parse_squeue(self.runner(["squeue", "--json", "--all"]), ts, self.capacity)
