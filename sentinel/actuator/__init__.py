"""The actuator seam: commands in, verified scheduler steps out.

``Actuator`` executes one command; ``Scheduler`` is the narrow interface a real scheduler backend implements
(Slurm and Kubernetes in later work, the simulator's in-memory scheduler for the demo).
"""

from __future__ import annotations

from typing import Protocol

from sentinel.events import ActionResult, Command


class Scheduler(Protocol):
    def jobs_on(self, node: str) -> list[str]:
        """Ids of the jobs running on ``node``."""
        ...

    def checkpoint(self, job_id: str) -> bool:
        """Ask the job to checkpoint; True once it acknowledged."""
        ...

    def drain(self, node: str, reason: str) -> None:
        """Stop new work landing on ``node``, marked with ``reason`` (our owned prefix)."""
        ...

    def drain_reason(self, node: str) -> str | None:
        """The reason ``node`` is drained with, or None when it is not drained."""
        ...

    def requeue(self, job_id: str) -> None:
        """Put the job back in the queue so it restarts elsewhere (from its last checkpoint)."""
        ...


class Actuator(Protocol):
    def execute(self, command: Command) -> list[ActionResult]: ...
