"""The actuator service: consumes commands, executes each once through the configured Actuator, publishes
every step's result. Exactly one actuator service runs at a time (one consumer group on the commands topic)."""

from __future__ import annotations

from sentinel import codec
from sentinel.actuator import Actuator
from sentinel.clock import Clock
from sentinel.errors import CodecError
from sentinel.events import Command
from sentinel.metrics import Metrics
from sentinel.transport import COMMANDS, RESULTS, Transport
from sentinel.transport.deadletter import send_dead_letter


class ActuatorService:
    def __init__(
        self, transport: Transport, actuator: Actuator, metrics: Metrics, clock: Clock, group: str = "sentinel-actuator"
    ) -> None:
        self.transport = transport
        self.actuator = actuator
        self.metrics = metrics
        self.clock = clock
        self.group = group
        self.consumer = transport.consumer(group, [COMMANDS])

    def step(self, max_messages: int = 100, timeout_s: float = 0.0) -> int:
        messages = self.consumer.poll(max_messages, timeout_s)
        self.metrics.set_consumer_lag(self.group, self.consumer.lag())
        for message in messages:
            self.metrics.messages_consumed.labels(message.topic).inc()
            try:
                command = codec.decode_as(message.value, Command)
            except CodecError as exc:
                send_dead_letter(self.transport, message, exc.reason, self.metrics, self.clock.now())
                continue
            for result in self.actuator.execute(command):
                self.metrics.action_steps.labels(result.step.value, result.status.value).inc()
                self.transport.publish(RESULTS, result.node, codec.encode(result))
                self.metrics.messages_published.labels(RESULTS).inc()
        if messages:
            self.consumer.commit()
        return len(messages)
