"""An in-memory scheduler for the demo and the simulator: nodes, multi-node jobs, drain, checkpoint, requeue.

It implements ``sentinel.actuator.Scheduler`` the way Slurm behaves where it matters to Sentinel: a drained
node takes no new work, a requeued job goes back to pending and starts again on free, undrained nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sentinel.clock import Clock
from sentinel.errors import ActuatorError


@dataclass
class SimJob:
    id: str
    size: int
    nodes: list[str] = field(default_factory=list)
    state: str = "pending"  # pending | running
    last_checkpoint_ts: float | None = None
    requeues: int = 0
    crashes: int = 0


@dataclass
class SimNode:
    name: str
    drain_reason: str | None = None
    job: str | None = None


class SimScheduler:
    def __init__(self, nodes: list[str], clock: Clock) -> None:
        self.clock = clock
        self.nodes = {n: SimNode(n) for n in nodes}
        self.jobs: dict[str, SimJob] = {}

    def submit(self, job_id: str, size: int) -> None:
        self.jobs[job_id] = SimJob(job_id, size)
        self.schedule()

    def schedule(self) -> None:
        """Start pending jobs (oldest first) on idle, undrained nodes."""
        for job in self.jobs.values():
            if job.state != "pending":
                continue
            free = [n.name for n in self.nodes.values() if n.job is None and n.drain_reason is None]
            if len(free) < job.size:
                continue
            job.nodes, job.state = free[: job.size], "running"
            for name in job.nodes:
                self.nodes[name].job = job.id

    def crash_job_on(self, node: str) -> str | None:
        """A fault killed the job on ``node``: it loses its work since the last checkpoint and is requeued."""
        job_id = self.nodes[node].job
        if job_id is None:
            return None
        self.jobs[job_id].crashes += 1
        self._release(job_id)
        self.schedule()
        return job_id

    def _release(self, job_id: str) -> None:
        job = self.jobs[job_id]
        for name in job.nodes:
            self.nodes[name].job = None
        job.nodes, job.state = [], "pending"

    # --- sentinel.actuator.Scheduler -----------------------------------------------------------------------
    def _node(self, node: str) -> SimNode:
        try:
            return self.nodes[node]
        except KeyError:
            raise ActuatorError(f"unknown node {node!r}") from None

    def jobs_on(self, node: str) -> list[str]:
        job = self._node(node).job
        return [job] if job else []

    def checkpoint(self, job_id: str) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state != "running":
            return False
        job.last_checkpoint_ts = self.clock.now()
        return True

    def drain(self, node: str, reason: str) -> None:
        self._node(node).drain_reason = reason

    def drain_reason(self, node: str) -> str | None:
        return self._node(node).drain_reason

    def requeue(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            raise ActuatorError(f"unknown job {job_id!r}")
        if job.state == "running":
            job.requeues += 1
            self._release(job_id)
        self.schedule()
