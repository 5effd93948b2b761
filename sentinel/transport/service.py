"""The service loop, written once: every Sentinel service is poll -> handle -> commit -> publish in a loop that
survives a broker outage, beats systemd's watchdog and stops at once on SIGTERM.

``ConsumingService.step`` is one round of a consuming service (detector, controller, actuator): what must go
first (``before_poll``: findings left unsent, the quiet-incident sweep, resumed commands), one poll, the
consumer's lag, the messages counted and handled (``handle``: a bad one goes to the dead-letter topic with its
reason, ``sentinel.transport.deadletter``), the offsets committed once their effects are stored, then what goes
out after the commit (``after_commit``: the outbox, results). ``run_loop`` repeats rounds of one or more
services (the agent's collection too) until ``stop`` is set: a ``TransportError`` is logged and retried after
``RETRY_S``, every round beats the ``Heartbeat`` (READY=1, then WATCHDOG=1), and with ``interval_s`` the rounds
are paced.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

from sentinel.clock import Clock
from sentinel.errors import TransportError
from sentinel.obs.metrics import ServiceMetrics
from sentinel.obs.sdnotify import Heartbeat
from sentinel.transport import Consumer, Message, Transport, poison
from sentinel.transport.deadletter import send_dead_letter

T = TypeVar("T")

log = logging.getLogger(__name__)

RETRY_S = 1.0  # after a transport error: the broker is away or slow; the round is tried again


class ConsumingService:
    """A service fed by one consumer group. Subclasses set ``consumer``, ``group``, ``metrics`` and ``batch`` and
    implement ``handle``; ``before_poll`` and ``after_commit`` are optional."""

    consumer: Consumer
    group: str
    metrics: ServiceMetrics
    transport: Transport
    clock: Clock
    batch = 500  # messages per poll

    def survive(self, message: Message, work: Callable[[], T]) -> T | None:
        """``work()`` for one message; if it raises for a reason of the message's own (``poison.is_transient``
        says which are not), the message becomes a dead letter with the error as its reason, counted in
        ``sentinel_poison_messages_total{topic,error}``, and None is returned: the round goes on and commits."""
        try:
            return work()
        except Exception as exc:
            if poison.is_transient(exc):
                raise
            log.exception("%s: message %s[%d]@%d could not be handled; dead-lettered", self.group, message.topic,
                          message.partition, message.offset)
            self.metrics.poison_messages.labels(message.topic, type(exc).__name__[:64]).inc()
            self.dead_letter(message, poison.reason(exc))
            return None

    def dead_letter(self, message: Message, reason: str) -> None:
        """Keep ``message`` on the dead-letter topic with ``reason`` (the detector batches its own)."""
        send_dead_letter(self.transport, message, reason, self.metrics, self.clock.now())

    def step(self, max_messages: int | None = None, timeout_s: float = 0.0) -> int:
        """One round; return how many messages were handled. A publish that fails raises ``TransportError``
        with what it did not send kept for the next round."""
        self.before_poll()
        messages = self.consumer.poll(max_messages or self.batch, timeout_s)
        self.metrics.set_consumer_lag(self.group, self.consumer.lag())
        if messages:
            for topic, count in Counter(message.topic for message in messages).items():
                self.metrics.messages_consumed.labels(topic).inc(count)
            self.handle(messages)
            self.consumer.commit()  # every message's effects are stored (or sent): a crash now loses nothing
        self.after_commit(messages)
        return len(messages)

    def before_poll(self) -> None:
        """What must happen before new messages are read."""

    def handle(self, messages: list[Message]) -> None:
        """Store (or send) the effects of ``messages``; the offsets are committed after this returns."""
        raise NotImplementedError

    def after_commit(self, messages: list[Message]) -> None:
        """What goes out once the round's effects are committed (``messages`` may be empty)."""


def run_loop(stop: threading.Event, rounds: Sequence[Callable[[], object]], *, name: str, heartbeat: Heartbeat,
             interval_s: float = 0.0, max_rounds: int | None = None,
             each_round: Callable[[], object] | None = None) -> None:
    """Call each of ``rounds`` in turn until ``stop`` is set (or ``max_rounds`` rounds ran), every ``interval_s``
    when it is set. A ``TransportError`` is logged and retried after ``RETRY_S``; ``each_round`` (the detector's
    heap trim) and the heartbeat run after every round, failed or not: the watchdog catches a hung loop, a
    broker outage is the pipeline-lag alert's business."""
    done = 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            for step in rounds:
                step()
        except TransportError as exc:
            log.error("%s: %s; retrying", name, exc)
            stop.wait(RETRY_S)
        if each_round is not None:
            each_round()
        heartbeat.beat()
        done += 1
        if max_rounds is not None and done >= max_rounds:
            return
        if interval_s:
            stop.wait(max(interval_s - (time.monotonic() - started), 0.0))
