"""Per-node sliding windows of recent readings, as numpy ring buffers, and counter-delta arithmetic.

Pure state: fed with samples, queried by rules and by the feature functions (``models.features``). Nothing here
reads a clock or the network. GPU fields are floats (NaN when absent or when the GPU is lost); counters are kept
as float64, exact up to 2^53, which is plenty for the rates the features compute from them.
"""

from __future__ import annotations

import math

import numpy as np

from sentinel.counters import counter_delta
from sentinel.events import GpuReading, GpuState, TelemetrySample
from sentinel.models.fields import GPU_FIELDS, IB_COUNTERS, NODE_FIELDS, PRECURSOR_XIDS

__all__ = ["GPU_FIELDS", "IB_COUNTERS", "NODE_FIELDS", "PRECURSOR_XIDS", "NodeWindow", "counter_delta"]


def _f(value: float | int | bool | None) -> float:
    return math.nan if value is None else float(value)


def _gpu_row(gpu: GpuReading) -> tuple[float, ...]:
    crc = None
    if gpu.nvlinks:
        crc = sum(link.crc_errors or 0 for link in gpu.nvlinks)
    return (_f(gpu.temp_c), _f(gpu.power_w), _f(gpu.sm_clock_mhz), _f(gpu.util_gpu_pct), _f(gpu.ecc_sbe_volatile),
            _f(gpu.pcie_replay), _f(crc), _f(gpu.row_remap_pending))


class NodeWindow:
    """The last ``size`` samples of one node: per-GPU fields, throttle reasons, node counters, precursor Xids."""

    def __init__(self, size: int, gpus: int = 8) -> None:
        self.size = size
        self.count = 0  # samples seen (the ring holds min(count, size))
        self.gpu = np.full((size, len(GPU_FIELDS), gpus), np.nan)
        self.node = np.full((size, len(NODE_FIELDS)), np.nan)
        self.throttle = np.zeros((size, gpus), dtype=np.int64)
        self.temp_c = self.gpu[:, 0, :]  # a view: the thermal rule reads it directly
        self.last_ts = 0.0
        self.last_ecc_dbe: dict[int, int | None] = {}
        self.lost: set[int] = set()  # GPUs currently reported lost
        self.hot_reported: set[int] = set()  # GPUs with an open thermal finding in this episode
        self.hot_warned: set[int] = set()  # GPUs warned of one reading over the thermal limit in this episode
        self.slow_streak: dict[int, int] = {}  # GPU -> consecutive samples lagging its peers (straggler rule)
        self.slow_reported: set[int] = set()
        self.ib_rate_reported = 0  # 0: no open InfiniBand episode; 1: alerted; 2: checkpoint and drain asked
        self.counter_reported: set[tuple[str, int]] = set()  # (rule, GPU) with an open counter warning
        self.precursor_xid_ts: dict[int, float] = {}  # GPU -> time of its last Xid 63/64

    @property
    def gpus(self) -> int:
        return int(self.gpu.shape[2])

    def _ensure_gpus(self, n: int) -> None:
        have = self.gpus
        if n > have:
            self.gpu = np.concatenate([self.gpu, np.full((self.size, len(GPU_FIELDS), n - have), np.nan)], axis=2)
            self.throttle = np.hstack([self.throttle, np.zeros((self.size, n - have), dtype=np.int64)])
            self.temp_c = self.gpu[:, 0, :]

    def push(self, sample: TelemetrySample) -> None:
        top = max((g.index for g in sample.gpus), default=-1) + 1
        self._ensure_gpus(top)
        row = self.count % self.size
        width = self.gpus
        columns = [(math.nan,) * len(GPU_FIELDS)] * width
        throttle = [0] * width
        for gpu in sample.gpus:
            if gpu.state is GpuState.OK:
                columns[gpu.index] = _gpu_row(gpu)  # finite or NaN: the codec rejects NaN and infinities
            throttle[gpu.index] = gpu.throttle_reasons or 0
        self.gpu[row] = np.array(columns).T
        self.throttle[row] = throttle
        ib = [math.nan] * len(IB_COUNTERS)
        for nic in sample.nics:
            if nic.link_layer.lower() == "infiniband":
                for i, name in enumerate(IB_COUNTERS):
                    value = nic.counters.get(name.removeprefix("ib_"))
                    if value is not None:
                        ib[i] = value if math.isnan(ib[i]) else ib[i] + value
        self.node[row] = (sample.ts, *ib)
        self.count += 1
        self.last_ts = sample.ts

    def note_xid(self, gpu: int, xid: int, ts: float) -> None:
        if xid in PRECURSOR_XIDS:
            self.precursor_xid_ts[gpu] = ts

    def recent(self, array: np.ndarray, n: int) -> np.ndarray:
        """The last ``n`` rows of ``array`` in time order (fewer if fewer were pushed)."""
        n = min(n, self.count, self.size)
        rows = [(self.count - n + i) % self.size for i in range(n)]
        return array[rows]

    def series(self, n: int | None = None) -> dict[str, np.ndarray]:
        """The last ``n`` samples (default: the whole ring) as named arrays in time order: GPU fields (T, G),
        node fields (T,) and ``throttle`` (T, G) — the input of ``models.features``."""
        n = self.size if n is None else n
        gpu, node = self.recent(self.gpu, n), self.recent(self.node, n)
        out = {name: gpu[:, i, :] for i, name in enumerate(GPU_FIELDS)}
        out.update({name: node[:, i] for i, name in enumerate(NODE_FIELDS)})
        out["throttle"] = self.recent(self.throttle, n)
        return out

    def xid_age_s(self, now_ts: float, cap_s: float) -> np.ndarray:
        """Seconds since each GPU's last precursor Xid (``cap_s`` when none)."""
        ages = np.full(self.gpus, cap_s)
        for gpu, ts in self.precursor_xid_ts.items():
            if gpu < self.gpus:
                ages[gpu] = min(max(now_ts - ts, 0.0), cap_s)
        return ages
