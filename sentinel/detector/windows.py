"""Per-node sliding windows of recent GPU readings, as numpy ring buffers, and counter-delta arithmetic.

Pure state: fed with samples, queried by rules. Nothing here reads a clock or the network.
"""

from __future__ import annotations

import math

import numpy as np

from sentinel.counters import counter_delta
from sentinel.events import GpuState, TelemetrySample

__all__ = ["NodeWindow", "counter_delta"]


class NodeWindow:
    """The last ``size`` samples of one node: per-GPU temperature and throttle reasons, plus counter state."""

    def __init__(self, size: int, gpus: int = 8) -> None:
        self.size = size
        self.count = 0  # samples seen (the ring holds min(count, size))
        self.temp_c = np.full((size, gpus), np.nan)
        self.throttle = np.zeros((size, gpus), dtype=np.int64)
        self.last_ts = 0.0
        self.last_ecc_dbe: dict[int, int | None] = {}
        self.lost: set[int] = set()  # GPUs currently reported lost
        self.hot_reported: set[int] = set()  # GPUs with an open thermal finding in this episode

    def _ensure_gpus(self, n: int) -> None:
        have = self.temp_c.shape[1]
        if n > have:
            self.temp_c = np.hstack([self.temp_c, np.full((self.size, n - have), np.nan)])
            self.throttle = np.hstack([self.throttle, np.zeros((self.size, n - have), dtype=np.int64)])

    def push(self, sample: TelemetrySample) -> None:
        top = max((g.index for g in sample.gpus), default=-1) + 1
        self._ensure_gpus(top)
        row = self.count % self.size
        width = self.temp_c.shape[1]
        temps, throttle = [math.nan] * width, [0] * width  # one row assignment each: cheaper than 2n item writes
        for gpu in sample.gpus:
            if gpu.state is GpuState.OK and gpu.temp_c is not None:
                temps[gpu.index] = gpu.temp_c  # finite: the codec rejects NaN and infinities
            throttle[gpu.index] = gpu.throttle_reasons or 0
        self.temp_c[row] = temps
        self.throttle[row] = throttle
        self.count += 1
        self.last_ts = sample.ts

    def recent(self, array: np.ndarray, n: int) -> np.ndarray:
        """The last ``n`` rows of ``array`` in time order (fewer if fewer were pushed)."""
        n = min(n, self.count, self.size)
        rows = [(self.count - n + i) % self.size for i in range(n)]
        return array[rows, :]
