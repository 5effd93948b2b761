"""The actuator seam: commands in, verified scheduler steps out.

``Actuator`` executes one command; ``Scheduler`` is the narrow interface a real scheduler backend implements
(Slurm and Kubernetes in later work, the simulator's in-memory scheduler for the demo).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sentinel.events import ActionResult, Command

# Every drain Sentinel makes carries this reason prefix ("sentinel: <incident> <summary>"); the actuators resume,
# and the demo counts, only nodes whose reason starts with it.
OWNED_REASON_PREFIX = "sentinel:"
# In the reason of a drain on a lemon node (policy.lemon): such a node is never returned to service by itself
# (``check.resume_own_drains``); a person repairs it and runs ``sentinel resume NODE``.
LEMON_MARK = "[lemon]"


@dataclass(frozen=True)
class JobTiming:
    """What a scheduler knows about a job's progress, in epoch seconds; None where it does not know."""

    last_checkpoint_ts: float | None
    end_ts: float | None  # when the job is expected to end (its time limit, or what it announced)


@runtime_checkable
class JobTimingSource(Protocol):
    """Optional for a Scheduler: with it the actuator skips a checkpoint that would buy nothing (the job saved
    moments ago, or ends soon anyway). Schedulers without it always checkpoint."""

    def job_timing(self, job_id: str) -> JobTiming | None: ...


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


@runtime_checkable
class Resumable(Protocol):
    def drain_reason(self, node: str) -> str | None: ...

    """A Scheduler that can undo its own drain (``sentinel resume NODE``): True when it did, False when the node
    was not drained; a node someone else drained is refused with an error."""

    def resume(self, node: str) -> bool: ...

    def drained_since(self, node: str) -> float | None:
        """When the current drain of ``node`` was made (epoch seconds), None when not drained or unknown."""
        ...


@runtime_checkable
class NodeLister(Protocol):
    """A Scheduler that lists the nodes it manages: the fleet the breaker's fraction is taken of (names seen on
    the telemetry topic can be invented by anyone who can produce to it)."""

    def node_names(self) -> list[str]: ...


class StepLog(Protocol):
    """What an actuator needs of the journal (``sentinel.actuator.journal.Journal``) to resume a command."""

    def steps(self, command_id: str) -> list[ActionResult]: ...

    def record(self, result: ActionResult, now: float) -> None: ...


class Actuator(Protocol):
    def execute(self, command: Command, journal: StepLog | None = None) -> list[ActionResult]:
        """Carry out the steps of ``command`` that ``journal`` has not recorded, recording each; return all."""
        ...
