"""The node agent: every interval, read each configured collector and publish one TelemetrySample.

A collector that fails is reported in ``collector_errors`` and counted; the agent keeps running.
"""

from __future__ import annotations

import logging
from typing import Protocol

from sentinel import codec
from sentinel.clock import Clock
from sentinel.errors import TransportError
from sentinel.events import HostReading, TelemetrySample
from sentinel.metrics import Metrics
from sentinel.transport import TELEMETRY, Transport

log = logging.getLogger(__name__)


class HostSource(Protocol):
    name: str

    def read(self) -> HostReading: ...


class Agent:
    def __init__(
        self, node: str, host: HostSource | None, transport: Transport, metrics: Metrics, clock: Clock
    ) -> None:
        self.node = node
        self.host = host
        self.transport = transport
        self.metrics = metrics
        self.clock = clock
        self.seq = 0

    def collect(self) -> TelemetrySample:
        errors: dict[str, str] = {}
        host = None
        if self.host is not None:
            try:
                host = self.host.read()
            except (OSError, ValueError, IndexError) as exc:
                errors[self.host.name] = f"{type(exc).__name__}: {exc}"[:4096]
                self.metrics.collector_errors.labels(self.host.name).inc()
        self.seq += 1
        return TelemetrySample(node=self.node, ts=self.clock.now(), seq=self.seq, host=host, collector_errors=errors)

    def publish_once(self) -> bool:
        """Collect and publish one sample; False (logged, counted) when the transport refused it."""
        sample = self.collect()
        try:
            self.transport.publish(TELEMETRY, self.node, codec.encode(sample))
        except TransportError as exc:
            self.metrics.publish_refused.labels(TELEMETRY).inc()
            log.warning("telemetry sample %d not published: %s", sample.seq, exc)
            return False
        self.metrics.messages_published.labels(TELEMETRY).inc()
        return True
