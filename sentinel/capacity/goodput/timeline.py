"""An event-level simulation of synchronous training jobs on a fleet whose nodes fail, get drained and come back.

Each job runs on a fixed number of nodes and checkpoints periodically: ``interval_s`` of compute, then a blocking
write of ``write_s``. What can happen to a node (``Stop``):
- ``FAIL``: it fails unexpectedly. Its job (if it is in one and running) loses the compute since its last completed
  checkpoint, hangs for ``hang_s`` until someone notices, waits for a spare node, restarts (``restart_s``).
- ``CRASH``: the job dies but the node is fine (a software fault): the same costs, no replacement needed.
- ``DRAIN``: a system takes the node out on purpose. With ``checkpoint`` the job first writes a checkpoint (no
  compute is lost); without, it loses the compute since its last checkpoint; no hang either way. The node is out
  for ``repair_s``; a drain marked ``false`` books all its costs to ``false_drains``.
- ``SLOW``: one of its GPUs turns fail-slow; its job runs at ``fail_slow_speed`` while the node is in it.
A node out of service (in repair) ignores what happens to it; a node in the spare pool that fails or is drained
goes to repair. A job that lost a node takes one from the pool, or waits for one to come back. Interruptions that
land while a job is already down cost nothing more than the replacement node.

Every second of every job's wall-clock time ends in one bucket: productive, or lost to ``checkpoint`` writes,
``rework``, ``hang_detection``, ``restart``, ``spare_wait``, ``slow_steps`` or ``false_drains``; the buckets sum to
the wall-clock time (tested), weighted by each job's GPUs.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum

_STOP, _RETURN, _NOTICE, _READY = 0, 1, 2, 3  # heap entries: an input stop, a node back, a job's timers
CAUSES = ("checkpoint", "rework", "hang_detection", "restart", "spare_wait", "slow_steps", "false_drains")


class Kind(IntEnum):
    FAIL = 1
    CRASH = 2
    DRAIN = 3
    SLOW = 4


@dataclass(frozen=True)
class Stop:
    t_s: float
    node: int
    kind: Kind
    checkpoint: bool = False  # DRAIN: write a checkpoint first
    hang_s: float = 0.0  # FAIL / CRASH: until the stop is noticed
    repair_s: float = 0.0  # FAIL / DRAIN: how long the node stays out of service
    false: bool = False  # DRAIN of a healthy node


@dataclass(frozen=True)
class Costs:
    interval_s: float
    write_s: float
    restart_s: float
    fail_slow_speed: float = 0.6


@dataclass
class Result:
    wall_gpu_s: float = 0.0
    productive_gpu_s: float = 0.0
    lost_gpu_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    interruptions: int = 0  # unexpected stops of a running job (FAIL, CRASH)
    planned_stops: int = 0  # drains that stopped a running job
    false_drains: int = 0  # drains of healthy nodes (wherever they were)

    @property
    def ettr(self) -> float:
        return self.productive_gpu_s / self.wall_gpu_s if self.wall_gpu_s else 1.0


class _Job:
    def __init__(self, index: int, nodes: list[int], gpus: int) -> None:
        self.index = index  # its place in Timeline.jobs (timer events carry it)
        self.nodes = set(nodes)
        self.gpus = gpus
        self.up = True
        self.run_start = 0.0
        self.rates: list[tuple[float, float]] = [(0.0, 1.0)]  # (from, speed) since run_start
        self.missing = 0
        self.phase = ""  # down: "notice" (hang or checkpoint write), "wait", "restart"
        self.phase_since = 0.0
        self.first_bucket = ""
        self.false = False  # the current down phase comes from a false drain
        self.due = -1.0  # when the current down phase's timer fires (older timers are stale)


class Timeline:
    def __init__(self, jobs: list[list[int]], pool: list[int], gpus_per_node: int, costs: Costs,
                 duration_s: float) -> None:
        self.costs = costs
        self.duration = duration_s
        self.jobs = [_Job(j, nodes, len(nodes) * gpus_per_node) for j, nodes in enumerate(jobs)]
        self.job_of: dict[int, int] = {n: j for j, nodes in enumerate(jobs) for n in nodes}
        self.pool: deque[int] = deque(pool)
        self.in_repair: set[int] = set()
        self.slow: set[int] = set()
        self.result = Result()
        self._heap: list[tuple[float, int, int, int, int]] = []  # (t, priority, seq, what, arg)
        self._seq = 0
        self._stops: list[Stop] = []

    # ----- bookkeeping ---------------------------------------------------------------------------------------

    def _book(self, job: _Job, cause: str, seconds: float) -> None:
        if seconds > 0:
            bucket = "false_drains" if job.false and cause != "productive" else cause
            if bucket == "productive":
                self.result.productive_gpu_s += seconds * job.gpus
            else:
                self.result.lost_gpu_s[bucket] += seconds * job.gpus

    def _compute_until(self, job: _Job, t: float) -> float:
        """Compute time of the current up phase from its start to ``t`` (writes excluded)."""
        c = self.costs
        elapsed = max(0.0, t - job.run_start)
        cycles = math.floor(elapsed / (c.interval_s + c.write_s))
        return cycles * c.interval_s + min(elapsed - cycles * (c.interval_s + c.write_s), c.interval_s)

    def _productive(self, job: _Job, until: float) -> float:
        """Productive seconds of compute from the up phase's start to ``until``: compute weighted by speed."""
        total = 0.0
        bounds = [*job.rates, (math.inf, 0.0)]
        for (start, speed), (end, _) in zip(bounds, bounds[1:], strict=False):
            a, b = max(start, job.run_start), min(end, until)
            if b > a:
                total += speed * (self._compute_until(job, b) - self._compute_until(job, a))
        return total

    def _end_up_phase(self, job: _Job, t: float, keep_all: bool, rework: str = "rework") -> None:
        """Close the up phase at ``t``: what was computed is kept up to the last checkpoint (or all of it)."""
        c = self.costs
        elapsed = t - job.run_start
        cycle = c.interval_s + c.write_s
        cycles = math.floor(elapsed / cycle)
        computed = self._compute_until(job, t)
        saved_until = t if keep_all else job.run_start + cycles * cycle
        saved = self._compute_until(job, saved_until)
        productive = self._productive(job, saved_until)
        self._book(job, "productive", productive)
        self._book(job, "slow_steps", saved - productive)
        self._book(job, rework, computed - saved)
        self._book(job, "checkpoint", elapsed - computed)
        job.up = False

    def _speed(self, job: _Job) -> float:
        return self.costs.fail_slow_speed if job.nodes & self.slow else 1.0

    def _set_speed(self, job: _Job, t: float) -> None:
        speed = self._speed(job)
        if job.up and job.rates[-1][1] != speed:
            job.rates.append((t, speed))

    def _push(self, t: float, priority: int, what: int, arg: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, priority, self._seq, what, arg))

    # ----- nodes ---------------------------------------------------------------------------------------------

    def _remove(self, node: int, t: float, repair_s: float) -> _Job | None:
        """Take ``node`` out of service until ``t + repair_s``; return the job it left (if any)."""
        self.in_repair.add(node)
        self._push(t + repair_s, 0, _RETURN, node)
        if node in self.pool:
            self.pool.remove(node)
        j = self.job_of.pop(node, None)
        if j is None:
            return None
        job = self.jobs[j]
        job.nodes.discard(node)
        job.missing += 1
        self._fill(job, t)
        return job

    def _fill(self, job: _Job, t: float) -> None:
        while job.missing and self.pool:
            node = self.pool.popleft()
            job.nodes.add(node)
            self.job_of[node] = job.index
            job.missing -= 1
        if not job.missing and not job.up and job.phase == "wait":
            self._book(job, "spare_wait", t - job.phase_since)
            self._start_restart(job, t)

    def _start_restart(self, job: _Job, t: float) -> None:
        job.phase, job.phase_since, job.due = "restart", t, t + self.costs.restart_s
        self._push(job.due, 1, _READY, job.index)

    # ----- jobs ----------------------------------------------------------------------------------------------

    def _go_down(self, job: _Job, t: float, first_bucket: str, first_s: float, false: bool) -> None:
        job.false = false
        job.phase, job.phase_since, job.first_bucket, job.due = "notice", t, first_bucket, t + first_s
        self._push(job.due, 1, _NOTICE, job.index)

    def _notice(self, job: _Job, t: float) -> None:
        self._book(job, job.first_bucket, t - job.phase_since)
        if job.missing:
            job.phase, job.phase_since = "wait", t
        else:
            self._start_restart(job, t)

    def _ready(self, job: _Job, t: float) -> None:
        self._book(job, "restart", t - job.phase_since)
        if job.missing:
            job.phase, job.phase_since = "wait", t
            return
        job.up, job.run_start, job.false, job.phase = True, t, False, ""
        job.rates = [(t, self._speed(job))]

    def _stop(self, s: Stop) -> None:
        t, node = s.t_s, s.node
        if node in self.in_repair:
            return
        if s.kind is Kind.SLOW:
            self.slow.add(node)
            if node in self.job_of:
                self._set_speed(self.jobs[self.job_of[node]], t)
            return
        if s.kind is Kind.DRAIN and s.false:
            self.result.false_drains += 1
        j = self.job_of.get(node)
        job = self.jobs[j] if j is not None else None
        if s.kind is Kind.CRASH:
            if job is not None and job.up:
                self.result.interruptions += 1
                self._end_up_phase(job, t, keep_all=False)
                self._go_down(job, t, "hang_detection", s.hang_s, False)
            return
        running = job is not None and job.up
        if running and job is not None:
            if s.kind is Kind.FAIL:
                self.result.interruptions += 1
                self._end_up_phase(job, t, keep_all=False)
                self._go_down(job, t, "hang_detection", s.hang_s, False)
            else:
                self.result.planned_stops += 1
                self._end_up_phase(job, t, keep_all=s.checkpoint, rework="false_drains" if s.false else "rework")
                self._go_down(job, t, "checkpoint", self.costs.write_s if s.checkpoint else 0.0, s.false)
        self.slow.discard(node)  # repaired before it comes back
        left = self._remove(node, t, s.repair_s)
        if left is not None:
            self._set_speed(left, t)

    def run(self, stops: list[Stop]) -> Result:
        for s in stops:
            if 0.0 <= s.t_s < self.duration:
                self._push(s.t_s, 2, _STOP, len(self._stops))
                self._stops.append(s)
        while self._heap and self._heap[0][0] < self.duration:
            t, _, _, what, arg = heapq.heappop(self._heap)
            if what == _STOP:
                self._stop(self._stops[arg])
            elif what == _RETURN:
                self.in_repair.discard(arg)
                self.pool.append(arg)
                for job in self.jobs:
                    if job.missing:
                        self._fill(job, t)
            elif self.jobs[arg].due == t and not self.jobs[arg].up:
                if what == _NOTICE and self.jobs[arg].phase == "notice":
                    self._notice(self.jobs[arg], t)
                elif what == _READY and self.jobs[arg].phase == "restart":
                    self._ready(self.jobs[arg], t)
        for job in self.jobs:
            if job.up:
                self._end_up_phase(job, self.duration, keep_all=True)
            else:
                bucket = {"notice": job.first_bucket, "wait": "spare_wait", "restart": "restart"}[job.phase]
                self._book(job, bucket, self.duration - job.phase_since)
            self.result.wall_gpu_s += self.duration * job.gpus
        return self.result


def simulate(jobs: list[list[int]], pool: list[int], gpus_per_node: int, costs: Costs, duration_s: float,
             stops: list[Stop]) -> Result:
    """Run ``stops`` (any order) against the jobs; see the module docstring."""
    return Timeline(jobs, pool, gpus_per_node, costs, duration_s).run(sorted(stops, key=lambda s: s.t_s))
