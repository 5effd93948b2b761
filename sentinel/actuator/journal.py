"""The actuator's journal: which commands it accepted and which of their steps it carried out.

Each step's result is recorded before the next step runs, so a command cut short (a kill -9, a watchdog kill
during a long checkpoint wait, an exception from the scheduler's client) resumes at its next step when it comes
back: redelivered by the broker, re-sent by the controller's outbox, or found unfinished at start-up. A command
whose verify step is recorded is finished; asking for it again only repeats its recorded results.
"""

from __future__ import annotations

from typing import Protocol

from sentinel.events import ActionResult, Command, Step


class Journal(Protocol):
    def accept(self, command: Command, now: float, envelope: bytes) -> bool:
        """Record ``command`` as accepted with the signed ``envelope`` it came in; False when it was accepted
        before (a redelivery or a re-send)."""
        ...

    def steps(self, command_id: str) -> list[ActionResult]:
        """The results recorded for ``command_id`` so far, in the order they were carried out."""
        ...

    def record(self, result: ActionResult, now: float) -> None:
        """Record one step's result (idempotent by step); the verify step finishes the command."""
        ...

    def finished(self, command_id: str) -> bool: ...

    def claim(self, command_id: str, owner: str, now: float, lease_s: float) -> bool:
        """Take the lease on an accepted command for ``lease_s``: True when free, expired or already ``owner``'s,
        so two actuators never carry out one command at once and a restarted one takes its own back at once."""
        ...

    def release(self, command_id: str, owner: str) -> None:
        """Give the lease back (the command was interrupted and may be resumed by anyone)."""
        ...

    def unfinished(self, now: float) -> list[tuple[str, bytes]]:
        """Accepted and unfinished commands' ids and signed envelopes, oldest first: resumed at start-up once the
        envelope verifies again (one already started is finished even after its expiry, so a node is never left
        drained with its jobs not requeued). A row with no envelope (written by hand) has ``b""``."""
        ...

    def refuse(self, command_id: str, now: float) -> None:
        """Finish an entry whose envelope failed verification: never carried out, never resumed again."""
        ...


class MemoryJournal:
    """A journal in memory, for the one-process pipeline's tests and benchmarks (lost with the process)."""

    def __init__(self) -> None:
        self._commands: dict[str, bytes] = {}  # id -> envelope
        self._steps: dict[str, dict[Step, ActionResult]] = {}
        self._leases: dict[str, tuple[str, float]] = {}

        self._refused: set[str] = set()

    def accept(self, command: Command, now: float, envelope: bytes) -> bool:
        if command.id in self._commands:
            return False
        self._commands[command.id] = envelope
        self._steps[command.id] = {}
        return True

    def steps(self, command_id: str) -> list[ActionResult]:
        return list(self._steps.get(command_id, {}).values())

    def record(self, result: ActionResult, now: float) -> None:
        self._steps.setdefault(result.command_id, {}).setdefault(result.step, result)

    def finished(self, command_id: str) -> bool:
        return command_id in self._refused or Step.VERIFY in self._steps.get(command_id, {})

    def claim(self, command_id: str, owner: str, now: float, lease_s: float) -> bool:
        held = self._leases.get(command_id)
        if command_id not in self._commands or (held is not None and held[0] != owner and held[1] > now):
            return False
        self._leases[command_id] = (owner, now + lease_s)
        return True

    def release(self, command_id: str, owner: str) -> None:
        if self._leases.get(command_id, ("", 0.0))[0] == owner:
            del self._leases[command_id]

    def unfinished(self, now: float) -> list[tuple[str, bytes]]:
        return [(i, e) for i, e in self._commands.items() if not self.finished(i)]

    def refuse(self, command_id: str, now: float) -> None:
        self._refused.add(command_id)
