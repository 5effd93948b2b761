"""Load bins: one record per partition per 10-minute bin, and the recorder that fills them live.

A bin holds a snapshot of the scheduler queue taken when the bin closes (running and pending GPUs, capacity,
jobs submitted inside the bin) and the mean GPU utilisation of the telemetry that arrived during the bin. The
recorder is pure: callers hand it telemetry as it arrives and a queue snapshot when a bin closes (from
``squeue --json`` via ``sentinel.capacity.load.squeue``, pending pods, or the simulator), and store what it returns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sentinel.errors import ValidationError
from sentinel.events import TelemetrySample

BIN_S = 600.0
ALL = "all"  # the partition name for the whole cluster


def bin_start(ts: float, bin_s: float = BIN_S) -> float:
    return math.floor(ts / bin_s) * bin_s


@dataclass(frozen=True)
class LoadBin:
    """Load of one partition in one bin; ``ts`` is the bin start (seconds since the epoch)."""

    ts: float
    partition: str
    running_gpus: float
    pending_gpus: float
    submissions: int | None = None
    total_gpus: float | None = None
    util: float | None = None  # mean GPU utilisation, 0..1
    source: str = "squeue"

    def __post_init__(self) -> None:
        for name in ("running_gpus", "pending_gpus"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValidationError(f"load bin {name}: must be a finite number >= 0, got {value!r}")
        if self.util is not None and not 0.0 <= self.util <= 1.0:
            raise ValidationError(f"load bin util: must be in [0, 1], got {self.util!r}")


@dataclass(frozen=True)
class PartitionLoad:
    running_gpus: float = 0.0
    pending_gpus: float = 0.0
    total_gpus: float | None = None
    submit_ts: tuple[float, ...] | None = ()  # submit time of every job the snapshot saw; None: unknown


@dataclass(frozen=True)
class QueueJob:
    """One GPU job in a queue snapshot: the job table the job-aware forecast learns from (docs/forecast.md)."""

    job_id: str
    partition: str
    gpus: float  # allocated when running, requested when pending
    submit_ts: float | None
    start_ts: float | None  # None while pending
    time_limit_s: float | None = None  # None: unlimited or unknown


@dataclass(frozen=True)
class QueueSnapshot:
    """The scheduler queue at one moment, per partition (parsers fill ``ALL`` with the cluster total), and the GPU
    jobs in it when the source lists them (``jobs`` None: a source that does not, such as the simulator)."""

    ts: float
    partitions: dict[str, PartitionLoad] = field(default_factory=dict)
    jobs: tuple[QueueJob, ...] | None = None


class LoadRecorder:
    """Accumulates GPU utilisation over the open bin; ``close`` turns a queue snapshot into the bin's records."""

    def __init__(self, bin_s: float = BIN_S, source: str = "squeue") -> None:
        self.bin_s = bin_s
        self.source = source
        self._util_sum = 0.0
        self._util_n = 0

    def observe(self, samples: Iterable[TelemetrySample]) -> None:
        for sample in samples:
            for gpu in sample.gpus:
                if gpu.util_gpu_pct is not None:
                    self._util_sum += gpu.util_gpu_pct / 100.0
                    self._util_n += 1

    def close(self, snapshot: QueueSnapshot) -> list[LoadBin]:
        """The bin that ends at ``snapshot.ts``: one record per partition; the utilisation restarts."""
        start = bin_start(snapshot.ts - 1e-6, self.bin_s)
        util = min(max(self._util_sum / self._util_n, 0.0), 1.0) if self._util_n else None
        self._util_sum, self._util_n = 0.0, 0
        return bins_from_snapshot(snapshot, start, self.bin_s, util, self.source)


def bins_from_snapshot(
    snapshot: QueueSnapshot, start: float, bin_s: float, util: float | None, source: str
) -> list[LoadBin]:
    out = []
    for name, load in sorted(snapshot.partitions.items()):
        submitted = (None if load.submit_ts is None
                     else sum(1 for ts in load.submit_ts if start <= ts < start + bin_s))
        out.append(LoadBin(ts=start, partition=name, running_gpus=load.running_gpus, pending_gpus=load.pending_gpus,
                           submissions=submitted, total_gpus=load.total_gpus,
                           util=util if name == ALL else None, source=source))
    return out


def series(bins: Sequence[LoadBin], bin_s: float = BIN_S) -> dict[str, list[float]]:
    """Bins of one partition as aligned columns, one entry per bin from the first to the last; a missing bin
    repeats the previous one (the queue did not change as far as anyone saw)."""
    if not bins:
        return {"ts": [], "running_gpus": [], "pending_gpus": [], "submissions": [], "total_gpus": []}
    ordered = sorted(bins, key=lambda b: b.ts)
    by_ts = {b.ts: b for b in ordered}
    out: dict[str, list[float]] = {k: [] for k in ("ts", "running_gpus", "pending_gpus", "submissions", "total_gpus")}
    last = ordered[0]
    n = int(round((ordered[-1].ts - ordered[0].ts) / bin_s)) + 1
    for i in range(n):
        ts = ordered[0].ts + i * bin_s
        cur = by_ts.get(ts)
        last = cur if cur is not None else last
        out["ts"].append(ts)
        out["running_gpus"].append(last.running_gpus)
        out["pending_gpus"].append(last.pending_gpus)
        out["submissions"].append(float(last.submissions or 0) if cur is not None else 0.0)
        out["total_gpus"].append(float(last.total_gpus) if last.total_gpus is not None else math.nan)
    return out
