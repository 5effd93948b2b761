"""The live load recorder: reads the scheduler queue every ``load.interval_s`` and stores load bins, then keeps
the stored demand forecaster fresh. Stepped by ``sentinel controller`` and ``sentinel run`` from their loops.

Snapshots are taken at multiples of the interval (by the clock) and labelled with that boundary, so with the
default 600 s every 10-minute bin holds the queue as it stood when the bin closed, the same rule as the trace
reader; a shorter interval rewrites the open bin until it closes (a bin written again replaces the earlier one).
Utilisation is the mean of the telemetry handed to ``observe`` since the previous snapshot (``sentinel run``
hands its agent's samples; the separate controller sees no telemetry and leaves it empty).

A failing ``squeue`` is logged and skipped: the next interval tries again, and the controller keeps running.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Protocol

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from sentinel.capacity.bins import LoadBin, LoadRecorder, QueueSnapshot
from sentinel.capacity.bins_store import record_load_bins
from sentinel.capacity.jobs_store import record_jobs
from sentinel.clock import Clock
from sentinel.errors import SentinelError
from sentinel.events import TelemetrySample

log = logging.getLogger(__name__)


class QueueSource(Protocol):
    def snapshot(self, ts: float) -> QueueSnapshot: ...


# after new bins of these partitions: refit the demand forecaster (load.refit), publish the outlook's gauges
Refresher = Callable[[Engine, list[str]], dict[str, str]]


class LoadService:
    def __init__(self, engine: Engine, source: QueueSource, clock: Clock, interval_s: float = 600.0,
                 refresher: Refresher | None = None, source_name: str = "squeue") -> None:
        """``refresher`` (the composition root passes the forecaster's) runs after new bins are stored; None
        records bins only."""
        self.engine, self.source, self.clock = engine, source, clock
        self.interval_s = interval_s
        self.refresher = refresher
        self.recorder = LoadRecorder(source=source_name)
        self._due = self._next(clock.now())
        self.recorded = 0  # bins stored since start

    def _next(self, now: float) -> float:
        return (math.floor(now / self.interval_s) + 1) * self.interval_s

    def observe(self, samples: Iterable[TelemetrySample]) -> None:
        self.recorder.observe(samples)

    def step(self) -> list[LoadBin]:
        """Record a snapshot when one is due; the bins stored (none when not due or on failure)."""
        now = self.clock.now()
        if now < self._due:
            return []
        boundary, self._due = self._due, self._next(now)
        try:
            snapshot = self.source.snapshot(boundary)
            bins = self.recorder.close(snapshot)
            record_load_bins(self.engine, bins)
            if snapshot.jobs is not None:  # the job table, when the source lists jobs (squeue does)
                record_jobs(self.engine, snapshot.ts, snapshot.jobs)
        except (SentinelError, SQLAlchemyError) as exc:
            log.warning("load bins not recorded at %.0f: %s", boundary, exc)
            return []
        self.recorded += len(bins)
        if self.refresher is not None and bins:
            try:
                done = self.refresher(self.engine, sorted({b.partition for b in bins}))
                refitted = sorted(p for p, what in done.items() if what == "fitted")
                if refitted:
                    log.info("demand forecaster refitted for %s", ", ".join(refitted))
            except (SentinelError, SQLAlchemyError, ValueError) as exc:
                log.warning("demand forecaster not refitted: %s", exc)
        return bins
