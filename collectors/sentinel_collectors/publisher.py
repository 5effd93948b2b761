"""Drains the spool into the transport on its own thread, in order, with backoff while the broker is away."""

from __future__ import annotations

import logging
import threading
import time

from sentinel.errors import TransportError
from sentinel.obs.metrics import AgentMetrics
from sentinel.transport import Transport
from sentinel_collectors.spool import Spool

log = logging.getLogger(__name__)


class SpoolPublisher:
    def __init__(self, spool: Spool, transport: Transport, metrics: AgentMetrics, batch: int = 500,
                 max_backoff_s: float = 5.0) -> None:
        self.spool = spool
        self.transport = transport
        self.metrics = metrics
        self.max_batch = batch
        self.batch = batch  # halved after a failed batch, grown by a quarter after a success (a slow broker that
        # cannot take a big backlog within the send timeout still drains, in smaller pieces)
        self.max_backoff_s = max_backoff_s
        self.failures = 0
        self._thread: threading.Thread | None = None

    def drain_once(self) -> int:
        """Send the oldest batch; return how many were acknowledged (0 when empty). Raises TransportError."""
        items = self.spool.peek(self.batch)
        if not items:
            return 0
        started = time.perf_counter()
        self.transport.publish_batch(item for _, item in items)
        self.metrics.publish_seconds.observe(time.perf_counter() - started)
        self.spool.remove_through(items[-1][0])
        for _, (topic, _, _) in items:
            self.metrics.messages_published.labels(topic).inc()
        return len(items)

    def run(self, stop: threading.Event) -> None:
        backoff = 0.1
        while not stop.is_set():
            try:
                if self.drain_once() == 0:
                    self.spool.available.wait(0.5)
                backoff = 0.1
                self.batch = min(self.batch + max(self.batch // 4, 1), self.max_batch)
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any error: sampling goes on anyway
                self.failures += 1
                self.batch = max(self.batch // 2, 1)
                reason = "transport" if isinstance(exc, TransportError) else type(exc).__name__
                self.metrics.publish_failures.labels(reason[:40]).inc()
                log.log(logging.WARNING if reason == "transport" else logging.ERROR,
                        "publish failed (%s: %s); %d message(s) spooled, retrying in %.1f s", reason, exc,
                        self.spool.depth(), backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)

    def start(self, stop: threading.Event) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, args=(stop,), name="spool-publisher", daemon=True)
        self._thread.start()
        return self._thread
