"""The actuator service: consumes signed commands, executes each valid one once through the configured Actuator,
publishes every step's result. Exactly one actuator service runs at a time (one consumer group on the commands
topic).

A command that fails verification (unsigned, forged, tampered, expired, replayed, invalid) is logged, counted in
``sentinel_commands_rejected_total{reason}``, kept on the dead-letter topic for forensics, and never executed.
"""

from __future__ import annotations

import logging

from sentinel import codec
from sentinel.actuator import Actuator
from sentinel.actuator.signing import CommandRejected, CommandVerifier, MemoryNonces, process_key
from sentinel.clock import Clock
from sentinel.metrics import Metrics
from sentinel.transport import COMMANDS, RESULTS, Transport
from sentinel.transport.deadletter import send_dead_letter

log = logging.getLogger(__name__)

DEFAULT_MAX_TTL_S = 3600.0


class ActuatorService:
    def __init__(
        self, transport: Transport, actuator: Actuator, metrics: Metrics, clock: Clock,
        group: str = "sentinel-actuator", verifier: CommandVerifier | None = None,
    ) -> None:
        """``verifier`` defaults to this process's ephemeral key, which only a controller in the same process
        signs with (the one-process pipeline); the separate services pass one built from ``security``."""
        self.transport = transport
        self.actuator = actuator
        self.metrics = metrics
        self.clock = clock
        self.verifier = verifier or CommandVerifier([process_key()], MemoryNonces(), clock, DEFAULT_MAX_TTL_S)
        self.group = group
        self.consumer = transport.consumer(group, [COMMANDS])

    def step(self, max_messages: int = 100, timeout_s: float = 0.0) -> int:
        messages = self.consumer.poll(max_messages, timeout_s)
        self.metrics.set_consumer_lag(self.group, self.consumer.lag())
        for message in messages:
            self.metrics.messages_consumed.labels(message.topic).inc()
            try:
                command = self.verifier.open(message.value)
            except CommandRejected as exc:
                log.warning("refused a command (offset %s, key %r): %s", message.offset, message.key, exc)
                self.metrics.commands_rejected.labels(exc.reason).inc()
                send_dead_letter(self.transport, message, f"command refused: {exc}", self.metrics, self.clock.now())
                continue
            for result in self.actuator.execute(command):
                self.metrics.action_steps.labels(result.step.value, result.status.value).inc()
                self.transport.publish(RESULTS, result.node, codec.encode(result))
                self.metrics.messages_published.labels(RESULTS).inc()
        if messages:
            self.consumer.commit()
        return len(messages)
