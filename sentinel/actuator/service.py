"""The actuator service: consumes signed commands, carries each valid one out exactly once through the configured
Actuator, publishes every step's result. One service consumes the commands topic at a time (one partition).

A command that fails verification (unsigned, forged, tampered, expired, invalid, or a finished command's envelope
replayed) is logged, counted in ``sentinel_commands_rejected_total{reason}``, kept on the dead-letter topic for
forensics, and never executed.

Exactly once across crashes: a verified command is recorded in the journal (keyed by its id) before its nonce,
and each step is recorded before the next runs. The same command arriving again (the broker redelivers an
uncommitted offset; the controller's outbox re-sends it with a new nonce) resumes at its next step, or, when
finished, only publishes its recorded results again. A lease in the journal keeps two actuators off one command;
at start the service resumes what its journal holds unfinished.

With ``workers`` > 0 each command runs on a worker thread (one command per node at a time), so a long checkpoint
wait or a slurmctld outage never blocks other commands, the service loop or the watchdog; results are published
from the loop. ``workers=0`` runs each command inline (the one-process pipeline, tests).
"""

from __future__ import annotations

import logging
import socket
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

from sentinel.actuator import Actuator
from sentinel.actuator.journal import Journal
from sentinel.actuator.sealed import Sealer
from sentinel.actuator.signing import CommandRejected, CommandVerifier
from sentinel.clock import Clock
from sentinel.events import ActionResult, Command
from sentinel.obs.metrics import ActuatorMetrics
from sentinel.transport import COMMANDS, RESULTS, Message, Transport
from sentinel.transport.deadletter import send_dead_letter
from sentinel.transport.service import ConsumingService

log = logging.getLogger(__name__)

LEASE_S = 900.0  # longer than any command takes (checkpoint wait + slurmctld retries); a crash frees it after this
RESUME_INTERVAL_S = 30.0  # unfinished commands in the journal (interrupted by an error) are retried this often


class ActuatorService(ConsumingService):
    metrics: ActuatorMetrics
    batch = 100

    def __init__(
        self, transport: Transport, actuator: Actuator, metrics: ActuatorMetrics, clock: Clock, *,
        verifier: CommandVerifier, journal: Journal, group: str = "sentinel-actuator", workers: int = 0,
        owner: str = "",
    ) -> None:
        """``verifier`` and ``journal`` come from the composition root (``daemon.command_signing``, the store's
        journal). ``owner`` names this actuator in the journal's leases (stable across its restarts). Results are
        sealed (``sentinel.actuator.sealed``) with the verifier's first key: the service key."""
        self.transport = transport
        self.actuator = actuator
        self.metrics = metrics
        self.clock = clock
        self.verifier = verifier
        self.sealer = Sealer(next(iter(verifier.keys.values())), ActionResult)
        self.journal = journal
        self.owner = owner or f"{socket.gethostname()}/{group}"
        self.group = group
        self.consumer = transport.consumer(group, [COMMANDS])
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="actuator") if workers > 0 else None
        self.running: dict[str, tuple[Command, Future[list[ActionResult] | None]]] = {}
        self.waiting: list[Command] = []  # accepted, waiting for a command on the same node to finish
        self.outgoing: list[ActionResult] = []  # results not yet published (a failed publish keeps them here)
        self._resume_ts = float("-inf")

    def before_poll(self) -> None:
        """Every ``RESUME_INTERVAL_S``, resume the journal's unfinished commands (interrupted by an error)."""
        now = self.clock.now()
        if now - self._resume_ts >= RESUME_INTERVAL_S:
            self._resume_ts = now
            for command_id, envelope in self.journal.unfinished(now):
                if not self._under_way(command_id) and (command := self._reverified(command_id, envelope)):
                    self._start(command, resumed=True)

    def _reverified(self, command_id: str, envelope: bytes) -> Command | None:
        """The journal entry's command, its signed envelope verified again (the store is not the key: a row put
        there by hand, or edited, is refused and finished, never carried out); expiry is not checked (a command
        already accepted is finished, not dropped)."""
        try:
            if not envelope:
                raise CommandRejected("unsigned", "journal entry has no signed envelope (not written by an actuator)")
            command = self.verifier.authentic(envelope).command
            if command.id != command_id:
                raise CommandRejected("invalid_command", f"journal entry holds the envelope of command {command.id}")
        except CommandRejected as exc:
            log.error("refused journal entry %s: %s; it is finished, not carried out", command_id, exc)
            self.metrics.commands_rejected.labels(exc.reason).inc()
            self.journal.refuse(command_id, self.clock.now())
            return None
        return command

    def handle(self, messages: list[Message]) -> None:
        """Verify each command and accept it into the journal (then its offset may be committed)."""
        for message in messages:
            self.survive(message, partial(self._receive, message))

    def after_commit(self, messages: list[Message]) -> None:
        self._collect()
        self._publish()

    def _receive(self, message: Message) -> None:
        try:
            opened = self.verifier.check(message.value)
            command = opened.command
            new = self.journal.accept(command, self.clock.now(), message.value)
            if not self.verifier.remember(opened) and (new or self.journal.finished(command.id)):
                raise CommandRejected("replayed", f"nonce of command {command.id} was already used")
        except CommandRejected as exc:
            log.warning("refused a command (offset %s, key %r): %s", message.offset, message.key, exc)
            self.metrics.commands_rejected.labels(exc.reason).inc()
            send_dead_letter(self.transport, message, f"command refused: {exc}", self.metrics, self.clock.now())
            return
        if self._under_way(command.id):
            return  # its results go out when it finishes
        self._start(command, resumed=not new and not self.journal.finished(command.id))

    def _under_way(self, command_id: str) -> bool:
        """Running or waiting for its node here."""
        return command_id in self.running or any(c.id == command_id for c in self.waiting)

    def _start(self, command: Command, resumed: bool) -> None:
        if self.pool is not None and any(c.node == command.node for c, _ in self.running.values()):
            self.waiting.append(command)  # one command per node at a time, in order
            return
        if not self.journal.claim(command.id, self.owner, self.clock.now(), LEASE_S):
            log.info("command %s is being carried out by another actuator", command.id)
            return
        if resumed:
            self.metrics.commands_resumed.inc()
            log.warning("resuming command %s on %s from its journal", command.id, command.node)
        if self.pool is None:
            self._finish(command, self._run(command))
            return
        self.running[command.id] = (command, self.pool.submit(self._run, command))
        self.metrics.actuator_in_flight.set(len(self.running))

    def _run(self, command: Command) -> list[ActionResult] | None:
        """Carry ``command`` out (its unrecorded steps); None when an unexpected error cut it short (it stays
        unfinished in the journal and is resumed later)."""
        before = {r.id for r in self.journal.steps(command.id)}
        try:
            results = self.actuator.execute(command, self.journal)
        except Exception as exc:  # noqa: BLE001 - a scheduler client's error must not kill the service
            log.exception("command %s on %s interrupted: %s", command.id, command.node, exc)
            self.metrics.actuator_errors.labels(type(exc).__name__).inc()
            self.journal.release(command.id, self.owner)
            return None
        for result in results:
            if result.id not in before:
                self.metrics.action_steps.labels(result.step.value, result.status.value).inc()
        return results

    def _finish(self, command: Command, results: list[ActionResult] | None) -> None:
        if results is not None:
            self.outgoing.extend(results)  # recorded ones too: a result lost with a crash goes out again

    def _collect(self) -> None:
        """Hand finished commands' results to the publisher; start commands that waited for their node."""
        for command_id, (command, future) in list(self.running.items()):
            if future.done():
                del self.running[command_id]
                self._finish(command, future.result())
        self.metrics.actuator_in_flight.set(len(self.running))
        waiting, self.waiting = self.waiting, []
        for command in waiting:
            self._start(command, resumed=False)

    def _publish(self) -> None:
        while self.outgoing:
            result = self.outgoing[0]
            self.transport.publish(RESULTS, result.node, self.sealer.seal(result))
            self.outgoing.pop(0)
            self.metrics.messages_published.labels(RESULTS).inc()

    def wait(self) -> None:
        """Let the commands in flight finish and publish their results (tests and benchmarks)."""
        while self.running or self.waiting:
            for _, future in list(self.running.values()):
                future.exception()  # blocks until done; _run never raises
            self._collect()
        self._publish()

    def close(self) -> None:
        """Stop taking work; commands still running finish on their threads (what they leave unfinished is
        resumed from the journal at the next start)."""
        self.waiting.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
