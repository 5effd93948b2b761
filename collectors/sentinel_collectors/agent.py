"""The node agent: every interval, read each due collector and emit one TelemetrySample plus the log events.

Collectors are ``Slot``s: a name, what the reading is (gpus, nics, host or logs), a read function and its own
interval. A collector that fails is logged, counted, reported in the sample's ``collector_errors`` and retried
with exponential backoff while the others go on. Each sample carries a per-node sequence number, so a consumer
can prove that nothing was lost. What the agent produces goes to a ``sink`` (the embedded transport in
``sentinel run``; the on-disk spool in front of Kafka in ``sentinel agent``) and never waits for a broker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from sentinel import codec
from sentinel.clock import Clock
from sentinel.errors import SentinelError
from sentinel.events import GpuReading, HostReading, LogEvent, NicReading, TelemetrySample
from sentinel.obs.metrics import AgentMetrics
from sentinel.obs.sdnotify import Heartbeat
from sentinel.transport import LOGS, TELEMETRY
from sentinel.transport.service import run_loop

log = logging.getLogger(__name__)

SlotKind = Literal["gpus", "nics", "host", "logs", "jobs"]
Item = tuple[str, str | None, bytes]
MAX_BACKOFF_S = 60.0


@dataclass
class Slot:
    name: str
    kind: SlotKind
    read: Callable[[], Any]
    interval_s: float
    next_due: float = 0.0
    failures: int = 0


class Agent:
    def __init__(self, node: str, slots: list[Slot], sink: Callable[[list[Item]], None], metrics: AgentMetrics,
                 clock: Clock, interval_s: float, notify: Callable[[str], None] | None = None,
                 frame: Callable[[bytes], bytes] | None = None) -> None:
        """``frame`` signs each encoded message with the node's key (``sentinel.transport.node_auth``)."""
        self.node = node
        self.frame = frame if frame is not None else (lambda data: data)
        self.jobs: list[str] = []
        self.slots = slots
        self.sink = sink
        self.metrics = metrics
        self.clock = clock
        self.interval_s = interval_s
        self.notify = notify
        self.heartbeat = Heartbeat(notify)
        self.seq = 0

    def cycle(self) -> tuple[TelemetrySample, list[LogEvent]]:
        """Read every due collector once, emit the sample and the log events, return them."""
        started = time.perf_counter()
        now = self.clock.now()
        gpus: list[GpuReading] = []
        nics: list[NicReading] = []
        host: HostReading | None = None
        logs: list[LogEvent] = []
        errors: dict[str, str] = {}
        for slot in self.slots:
            if now < slot.next_due:
                continue
            try:
                value = slot.read()
            except (SentinelError, OSError, ValueError) as exc:
                errors[slot.name] = f"{type(exc).__name__}: {exc}"[:4096]
                self._failed(slot, now, exc)
                continue
            slot.failures, slot.next_due = 0, now + slot.interval_s
            if slot.kind == "gpus":
                gpus.extend(value)
            elif slot.kind == "nics":
                nics.extend(value)
            elif slot.kind == "host":
                host = value
            elif slot.kind == "jobs":
                self.jobs = value  # kept between reads: the job slot runs less often than the sample
            else:
                logs.extend(value)
        self.seq += 1
        sample = TelemetrySample(node=self.node, ts=now, seq=self.seq, interval_s=self.interval_s, gpus=gpus,
                                 nics=nics, host=host, collector_errors=errors, jobs=self.jobs)
        items: list[Item] = [(TELEMETRY, self.node, self.frame(codec.encode(sample)))]
        items += [(LOGS, self.node, self.frame(codec.encode(event))) for event in logs]
        self.sink(items)
        self.metrics.samples_collected.inc()
        self.metrics.agent_cycle_seconds.observe(time.perf_counter() - started)
        return sample, logs

    def _failed(self, slot: Slot, now: float, exc: Exception) -> None:
        slot.failures += 1
        backoff = min(slot.interval_s * 2 ** (slot.failures - 1), MAX_BACKOFF_S)
        slot.next_due = now + backoff
        self.metrics.collector_errors.labels(slot.name).inc()
        log.warning("collector %s failed (%s); retrying in %.1f s", slot.name, exc, backoff)

    def run(self, stop: threading.Event, max_cycles: int | None = None) -> None:
        """Sample every ``interval_s`` until ``stop`` is set; tell systemd READY after the first sample."""
        run_loop(stop, [self.cycle], name="agent", heartbeat=self.heartbeat, interval_s=self.interval_s,
                 max_rounds=max_cycles)
