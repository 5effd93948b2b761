"""Per-node sliding windows of recent readings, as compact numpy ring buffers, and counter-delta arithmetic.

Pure state: fed with samples, queried by rules and by the feature functions (``models.features``). Nothing here
reads a clock or the network. Sized for a 100k-GPU fleet in one process (issue 18: at most 4 KB per GPU):

- GPU fields are float32 (NaN when absent or when the GPU is lost). Gauges (temperature, power, clock,
  utilisation) need no more. Counters (ECC, PCIe replays, NVLink CRC) are stored as offsets from a float64 base
  per GPU (0 at first), moved to the new reading whenever an offset would leave float32's exact integers (2^24),
  so every step inside the window is exact unless the counter jumped by more than 2^24 in one sample (then the
  older rows keep float32's relative precision, 1e-7 of the jump); ``series`` adds the base back (float64).
- Node fields (sample time, InfiniBand counters) stay float64; throttle reasons int64 (any NVML bitmask).
- Each push also notes whether a counter moved since the previous sample (``counters_moved``, ``ib_moved``): the
  rules' common case, nothing counted, is answered without reading the window.
"""

from __future__ import annotations

import itertools
import math
import operator
from typing import TYPE_CHECKING

import numpy as np

from sentinel.counters import counter_delta
from sentinel.events import GpuState, TelemetrySample
from sentinel.models.fields import GPU_FIELDS, IB_COUNTERS, NODE_FIELDS, PRECURSOR_XIDS

if TYPE_CHECKING:
    from sentinel.detector.rules import LastReading

__all__ = ["GPU_FIELDS", "IB_COUNTERS", "NODE_FIELDS", "PRECURSOR_XIDS", "NodeWindow", "counter_delta"]

# counter warnings watch PCIe replays and NVLink CRC (adjacent fields) and the remap-pending flag
_PCIE, _NVLINK, _PENDING = (GPU_FIELDS.index(n) for n in ("pcie_replay", "nvlink_crc", "remap_pending"))
assert GPU_FIELDS[_PCIE:_PENDING] == ("pcie_replay", "nvlink_crc")
_FIRST_COUNTER = GPU_FIELDS.index("ecc_sbe")
assert GPU_FIELDS[_FIRST_COUNTER:_PENDING] == ("ecc_sbe", "pcie_replay", "nvlink_crc")
_READ = operator.attrgetter("temp_c", "power_w", "sm_clock_mhz", "util_gpu_pct", "ecc_sbe_volatile", "pcie_replay")
_ABSENT = (math.nan,) * len(GPU_FIELDS)
_EXACT = float(2**24)  # float32 holds every integer up to here
_NAN = math.nan
_IB_NAMES = tuple(name.removeprefix("ib_") for name in IB_COUNTERS)


class NodeWindow:
    """The last ``size`` samples of one node: per-GPU fields, throttle reasons, node counters, precursor Xids."""

    __slots__ = ("size", "count", "gpu", "base", "node", "throttle", "temp_c", "last_ts", "lost", "hot_reported",
                 "hot_warned", "slow_streak", "slow_reported", "ib_rate_reported", "counter_reported",
                 "precursor_xid_ts", "counters_moved", "ib_moved", "last", "last_ib",
                 "last_rows")

    def __init__(self, size: int, gpus: int = 8) -> None:
        self.size = size
        self.count = 0  # samples seen (the ring holds min(count, size))
        self.gpu = np.full((size, len(GPU_FIELDS), gpus), np.nan, dtype=np.float32)
        self.base = np.zeros((len(GPU_FIELDS), gpus))  # float64; a counter's moves when it leaves float32's range
        self.node = np.full((size, len(NODE_FIELDS)), np.nan)
        self.throttle = np.zeros((size, gpus), dtype=np.int64)
        self.temp_c = self.gpu[:, 0, :]  # a view: the thermal rule reads it directly
        self.last_ts = 0.0
        self.lost: set[int] = set()  # GPUs currently reported lost
        self.hot_reported: set[int] = set()  # GPUs with an open thermal finding in this episode
        self.hot_warned: set[int] = set()  # GPUs warned of one reading over the thermal limit in this episode
        self.slow_streak: dict[int, int] = {}  # GPU -> consecutive samples lagging its peers (straggler rule)
        self.slow_reported: set[int] = set()
        self.ib_rate_reported = 0  # 0: no open InfiniBand episode; 1: alerted; 2: checkpoint and drain asked
        self.counter_reported: set[tuple[str, int]] = set()  # (rule, GPU) with an open counter warning
        self.precursor_xid_ts: dict[int, float] = {}  # GPU -> time of its last Xid 63/64
        self.counters_moved = False  # a GPU counter rose, or a remap is pending, in the last push
        self.ib_moved = False  # an InfiniBand counter rose in the last push
        self.last_ib: list[float] = []  # the InfiniBand counters of the last push (NODE_FIELDS[1:])
        self.last_rows: list[tuple[float, ...]] = []  # the GPU fields of the last push, per GPU (NaN: none)
        self.last: dict[int, LastReading] = {}  # each GPU's previous reading, as far as the rules need it

    @property
    def gpus(self) -> int:
        return int(self.gpu.shape[2])

    def _ensure_gpus(self, n: int) -> None:
        have = self.gpus
        if n > have:
            grow = n - have
            self.gpu = np.concatenate([self.gpu, np.full((self.size, len(GPU_FIELDS), grow), np.nan,
                                                         dtype=np.float32)], axis=2)
            self.base = np.hstack([self.base, np.zeros((len(GPU_FIELDS), grow))])
            self.throttle = np.hstack([self.throttle, np.zeros((self.size, grow), dtype=np.int64)])
            self.temp_c = self.gpu[:, 0, :]

    def push(self, sample: TelemetrySample) -> None:
        gpus = sample.gpus
        width = self.gpu.shape[2]
        rows = [_ABSENT] * width  # per GPU, GPU_FIELDS in order (NaN: no reading)
        throttle = [0] * width
        for g in gpus:
            index = g.index
            if index >= width:
                self._ensure_gpus(index + 1)
                rows += [_ABSENT] * (index + 1 - width)
                throttle += [0] * (index + 1 - width)
                width = index + 1
            if g.state is GpuState.OK:
                values = _READ(g)
                if None in values:
                    values = tuple(_NAN if v is None else v for v in values)
                crc = sum(link.crc_errors or 0 for link in g.nvlinks) if g.nvlinks else _NAN
                pending = g.row_remap_pending
                rows[index] = (*values, crc, _NAN if pending is None else float(pending))
            throttle[index] = g.throttle_reasons or 0
        fields = len(GPU_FIELDS)
        flat = np.fromiter(itertools.chain.from_iterable(rows), np.float64, width * fields)
        offset = flat.reshape(width, fields).T - self.base  # (fields, GPUs)
        if np.fmax.reduce(np.abs(offset[_FIRST_COUNTER:_PENDING]), axis=None) >= _EXACT:  # only counters get there
            self._rebase(offset)
        row = self.count % self.size
        stored = self.gpu[row]
        stored[:] = offset
        self.throttle[row] = throttle
        self.counters_moved = any(r[_PENDING] > 0 for r in rows) or any(
            now[_PCIE] > then[_PCIE] or now[_NVLINK] > then[_NVLINK] for now, then in zip(rows, self.last_rows,
                                                                                        strict=False))
        self.last_rows = rows
        ib = [_NAN] * len(IB_COUNTERS)
        for nic in sample.nics:
            layer = nic.link_layer
            if layer == "infiniband" or layer.lower() == "infiniband":
                counters = nic.counters
                for i, name in enumerate(_IB_NAMES):
                    value = counters.get(name)
                    if value is not None:
                        ib[i] = value if ib[i] != ib[i] else ib[i] + value  # NaN != NaN: the first port
        self.node[row] = (sample.ts, *ib)
        self.ib_moved = self.count > 0 and any(now > then for now, then in zip(ib, self.last_ib, strict=False))
        self.last_ib = ib
        self.count += 1
        self.last_ts = sample.ts

    def _rebase(self, offset: np.ndarray) -> None:
        """Move the base of counters whose offset left float32's exact range to the new reading."""
        shift = np.where(np.abs(offset) >= _EXACT, offset, 0.0)
        self.base += shift
        offset -= shift
        self.gpu -= shift.astype(np.float32)  # older rows keep float32's relative precision against the jump

    def note_xid(self, gpu: int, xid: int, ts: float) -> None:
        if xid in PRECURSOR_XIDS:
            self.precursor_xid_ts[gpu] = ts

    def recent(self, array: np.ndarray, n: int) -> np.ndarray:
        """The last ``n`` rows of ``array`` in time order (fewer if fewer were pushed)."""
        n = min(n, self.count, self.size)
        end = self.count % self.size
        if n <= end:
            return array[end - n:end]
        return np.concatenate([array[self.size - (n - end):], array[:end]])

    def series(self, n: int | None = None) -> dict[str, np.ndarray]:
        """The last ``n`` samples (default: the whole ring) as named float64 arrays in time order: GPU fields
        (T, G) with counters back at their absolute values, node fields (T,) and ``throttle`` (T, G) — the input
        of ``models.features``."""
        n = self.size if n is None else n
        gpu = self.recent(self.gpu, n).astype(np.float64) + self.base
        node = self.recent(self.node, n).copy()  # callers get arrays of their own, never views of the ring
        out = {name: gpu[:, i, :] for i, name in enumerate(GPU_FIELDS)}
        out.update({name: node[:, i] for i, name in enumerate(NODE_FIELDS)})
        out["throttle"] = self.recent(self.throttle, n).copy()
        return out

    def xid_age_s(self, now_ts: float, cap_s: float) -> np.ndarray:
        """Seconds since each GPU's last precursor Xid (``cap_s`` when none)."""
        ages = np.full(self.gpus, cap_s)
        for gpu, ts in self.precursor_xid_ts.items():
            if gpu < self.gpus:
                ages[gpu] = min(max(now_ts - ts, 0.0), cap_s)
        return ages
