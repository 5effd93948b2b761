"""A node's host metrics as fixed-width rows: one row per ``interval_s`` of sample time, the mean of its samples.

The host collector (sentinel_collectors.host) reads load, CPU, memory and disk; the NIC collector's byte counters give
network rates. Each sample becomes a vector over :data:`HOST_METRICS` (NaN where the node did not report the
metric); samples of one interval (at most ``SAMPLES_PER_ROW`` of them, spread over it) are averaged into one
row, emitted when the first sample of a later interval arrives. Rows live in :class:`RowRing`, which grows as
rows come (a fleet's history is not allocated up front).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sentinel.detector.sample_view import SampleView

HOST_METRICS = ("load1", "load5", "cpu_util_pct", "mem_used_pct", "disk_used_pct", "net_rx_bytes_per_s",
                "net_tx_bytes_per_s")
HOST_READING_METRICS = 5  # the first five come from the host collector; a row without any of them is not kept
# Network bytes: Ethernet statistics count bytes (rx_bytes, tx_bytes), InfiniBand port_rcv_data and port_xmit_data
# count 4-byte words.
IB_WORD_BYTES = 4
Row = npt.NDArray[np.float64]
_NAN = math.nan
_INFINITE = (math.inf, -math.inf)
SAMPLES_PER_ROW = 6  # samples averaged into a row at most (one every interval_s / 6 of sample time)


def sample_values(sample: SampleView) -> tuple[list[float], tuple[float, float] | None]:
    """The sample's host metrics (NaN where absent; network rates NaN: they need the previous sample) and its
    byte totals. Plain floats: this runs on every sample, numpy only once a row closes."""
    values = [_NAN] * len(HOST_METRICS)
    host = sample.host
    if host is not None:
        total, available = host.mem_total_bytes, host.mem_available_bytes
        mem = 100.0 * (1 - available / total) if total and available is not None else None
        for i, value in enumerate((host.load1, host.load5, host.cpu_util_pct, mem, host.disk_used_pct)):
            if value is not None:
                values[i] = float(value)
    rx = tx = 0
    counted = False
    for nic in sample.nics:
        if nic.link_layer == "loopback" or nic.name == "lo":
            continue
        counted = True
        c = nic.counters
        rx += (c.rx_bytes or 0) + IB_WORD_BYTES * (c.port_rcv_data or 0)
        tx += (c.tx_bytes or 0) + IB_WORD_BYTES * (c.port_xmit_data or 0)
    return values, ((float(rx), float(tx)) if counted else None)


@dataclass
class RowBuilder:
    """Averages one node's samples into rows of ``interval_s``; computes network rates between samples."""

    interval_s: float
    bucket: int | None = None
    sums: list[float] | None = None
    counts: list[int] | None = None
    net: tuple[float, float, float] | None = None  # (ts, rx bytes, tx bytes) of the previous sample taken
    taken_ts: float = -math.inf  # time of the last sample taken into a row

    def add(self, sample: SampleView) -> tuple[float, Row] | None:
        """Take one sample (time order); return ``(row end ts, row)`` when it closes the previous interval.

        A row averages at most SAMPLES_PER_ROW samples, spread over its interval: the detector sees every node
        every second or so, and averaging all of them would cost more than the rest of its work on a sample."""
        ts = sample.ts
        if ts - self.taken_ts < self.interval_s / SAMPLES_PER_ROW and int(ts // self.interval_s) == self.bucket:
            return None
        self.taken_ts = ts
        values, totals = sample_values(sample)
        if totals is not None:
            if self.net is not None and sample.ts > self.net[0] and totals[0] >= self.net[1] \
                    and totals[1] >= self.net[2]:
                dt = sample.ts - self.net[0]
                values[-2:] = ((totals[0] - self.net[1]) / dt, (totals[1] - self.net[2]) / dt)
            self.net = (sample.ts, *totals)
        bucket = int(sample.ts // self.interval_s)
        done = None
        if bucket != self.bucket:
            if self.bucket is not None and self.sums is not None and self.counts is not None:
                row = np.array([total / n if n else _NAN for total, n in zip(self.sums, self.counts, strict=True)])
                done = ((self.bucket + 1) * self.interval_s, row)
            self.bucket, self.sums, self.counts = bucket, [0.0] * len(values), [0] * len(values)
        sums, counts = self.sums, self.counts
        assert sums is not None and counts is not None
        for i, value in enumerate(values):
            if value == value and value not in _INFINITE:  # finite: NaN != NaN
                sums[i] += value
                counts[i] += 1
        return done


class RowRing:
    """The last ``capacity`` rows, oldest first; storage doubles as rows come, up to ``capacity``."""

    def __init__(self, capacity: int, width: int = len(HOST_METRICS), rows: Row | None = None) -> None:
        self.capacity, self.width = capacity, width
        self._data = np.full((min(4, capacity), width), np.nan, dtype=np.float32)  # doubles as rows come
        self._start = self._count = 0
        for row in rows if rows is not None else ():
            self.append(row)

    def __len__(self) -> int:
        return self._count

    def append(self, row: Row) -> None:
        if self._count == len(self._data) < self.capacity:
            grown = np.full((min(2 * len(self._data), self.capacity), self.width), np.nan, dtype=np.float32)
            grown[: self._count] = self.rows()
            self._data, self._start = grown, 0
        at = (self._start + self._count) % len(self._data)
        self._data[at] = row
        if self._count < len(self._data):
            self._count += 1
        else:
            self._start = (self._start + 1) % len(self._data)

    def rows(self) -> Row:
        """All rows, oldest first, as float64."""
        order = (self._start + np.arange(self._count)) % len(self._data)
        return self._data[order].astype(np.float64)
