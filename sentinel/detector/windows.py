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

import functools
import itertools
import math
import operator
from array import array
from typing import Any

import numpy as np

from sentinel.counters import counter_delta
from sentinel.detector.sample_view import GpuView, NicView, SampleView
from sentinel.events import GpuState
from sentinel_models.fields import GPU_FIELDS, IB_COUNTERS, NODE_FIELDS, PRECURSOR_XIDS

__all__ = ["GPU_FIELDS", "IB_COUNTERS", "NODE_FIELDS", "PRECURSOR_XIDS", "NodeWindow", "counter_delta"]

# counter rules watch PCIe replays, NVLink CRC and replays (adjacent fields), the remap-pending flag and the PCIe width
_PCIE, _NVLINK, _REPLAY, _PENDING, _DOWNTRAINED = (GPU_FIELDS.index(n) for n in (
    "pcie_replay", "nvlink_crc", "nvlink_replay", "remap_pending", "pcie_downtrained"))
assert GPU_FIELDS[_PCIE:_PENDING] == ("pcie_replay", "nvlink_crc", "nvlink_replay")
assert len(GPU_FIELDS) - 1 == _DOWNTRAINED
# index, state, the GPU_FIELDS read straight from a reading (up to pcie_replay), remap pending, throttle reasons,
# the PCIe link's width and maximum width
_READ = operator.attrgetter("index", "state", "temp_c", "power_w", "sm_clock_mhz", "util_gpu_pct", "ecc_sbe_volatile",
                            "pcie_replay", "row_remap_pending", "throttle_reasons", "pcie_link_width",
                            "pcie_link_width_max")
_GAUGES = operator.attrgetter("temp_c", "power_w", "sm_clock_mhz", "util_gpu_pct", "ecc_sbe_volatile", "pcie_replay")
_CRC = operator.attrgetter("crc_errors")
_RETRY = operator.attrgetter("replay_errors", "recovery_errors")
_NVLINKS = operator.attrgetter("nvlinks")
_LOST = GpuState.LOST
_ABSENT = (math.nan,) * len(GPU_FIELDS)
_COUNTERS = slice(GPU_FIELDS.index("ecc_sbe"), _PENDING)  # the fields kept as offsets from a moving base
assert GPU_FIELDS[_COUNTERS] == ("ecc_sbe", "pcie_replay", "nvlink_crc", "nvlink_replay")
_EXACT = float(2**24)  # float32 holds every integer up to here
STAGED = 8  # pushes kept as C doubles before they go into the rings in one numpy pass
_NAN = math.nan
_IB_READ = operator.attrgetter(*(name.removeprefix("ib_") for name in IB_COUNTERS))
_NO_IB = (None,) * len(IB_COUNTERS)
_IB_NONE = [_NAN] * len(IB_COUNTERS)


def _crc_sum(links: list[Any]) -> float:
    """CRC errors over a GPU's NVLinks (12 per GPU from NVML), a link without the counter as 0."""
    try:
        return sum(map(_CRC, links))
    except TypeError:  # some link had no reading (None)
        return sum(v or 0 for v in map(_CRC, links))


def _retry_sum(links: list[Any]) -> float:
    """Replay plus recovery errors over a GPU's NVLinks (NaN: no link has either counter)."""
    total, seen = 0, False
    for replay, recovery in map(_RETRY, links):
        if replay is not None:
            total, seen = total + replay, True
        if recovery is not None:
            total, seen = total + recovery, True
    return total if seen else _NAN


def _downtrained(width: int | None, width_max: int | None) -> float:
    """1.0: the PCIe link trained narrower than it can; 0.0: at full width; NaN: either is unknown."""
    if width is None or not width_max:
        return _NAN
    return 1.0 if width < width_max else 0.0


@functools.cache
def _in_order(width: int) -> tuple[int, ...]:
    return tuple(range(width))


def _infiniband(nics: list[NicView]) -> list[float]:
    """IB_COUNTERS summed over the node's InfiniBand ports that have any of them (NaN: none has the counter;
    IPoIB interfaces are of the infiniband link layer too, and have none)."""
    ports = [values for nic in nics
             if (nic.link_layer == "infiniband" or nic.link_layer.lower() == "infiniband")
             and (values := _IB_READ(nic.counters)) != _NO_IB]
    if not ports:
        return _IB_NONE.copy()
    try:
        return [sum(column) for column in zip(*ports, strict=True)]
    except TypeError:  # a port without one of them: sum the ports that have it
        return [sum(v for v in column if v is not None) if column.count(None) < len(column) else _NAN
                for column in zip(*ports, strict=True)]


class NodeWindow:
    """The last ``size`` samples of one node: per-GPU fields, throttle reasons, node counters, precursor Xids."""

    __slots__ = ("size", "count", "_gpu", "_base", "_node", "_throttle", "_staged", "_staged_throttle",
                 "_staged_node", "_pending", "last_ts", "lost", "hot_reported", "hot_warned", "slow_streak",
                 "slow_reported", "slow_since", "slow_persisted", "ib_rate_reported", "counter_reported",
                 "precursor_xid_ts", "counters_moved", "ib_moved", "last_key", "last_ib", "last_pcie", "last_crc",
                 "last_replay")

    def __init__(self, size: int, gpus: int = 8) -> None:
        self.size = size
        self.count = 0  # samples seen (the ring holds min(count, size)), staged ones included
        self._gpu = np.full((size, len(GPU_FIELDS), gpus), np.nan, dtype=np.float32)
        self._base = np.zeros((len(GPU_FIELDS), gpus))  # float64; a counter's moves when it leaves float32's range
        self._node = np.full((size, len(NODE_FIELDS)), np.nan)
        self._throttle = np.zeros((size, gpus), dtype=np.int64)
        # Pushed samples not yet in the rings, as C doubles and int64 (8 bytes a value, no Python objects): the
        # rings take them a few at a time (STAGED samples, or as soon as anything reads the window).
        self._staged = array("d")
        self._staged_throttle = array("q")
        self._staged_node = array("d")
        self._pending = 0
        self.last_ts = 0.0
        self.lost: set[int] = set()  # GPUs currently reported lost
        self.hot_reported: set[int] = set()  # GPUs with an open thermal finding in this episode
        self.hot_warned: set[int] = set()  # GPUs warned of one reading over the thermal limit in this episode
        self.slow_streak: dict[int, int] = {}  # GPU -> consecutive samples lagging its peers (straggler rule)
        self.slow_reported: set[int] = set()
        self.slow_since: dict[int, float] = {}  # GPU -> first lagging sample of its open episode
        self.slow_persisted: set[int] = set()  # GPUs whose open episode was reported as persisting
        self.ib_rate_reported = 0  # 0: no open InfiniBand episode; 1: alerted; 2: checkpoint and drain asked
        self.counter_reported: set[tuple[str, int]] = set()  # (rule, GPU) with an open counter warning
        self.precursor_xid_ts: dict[int, float] = {}  # GPU -> time of its last Xid 63/64
        self.counters_moved = False  # a GPU counter rose, or a remap is pending, in the last push
        self.ib_moved = False  # an InfiniBand counter rose in the last push
        self.last_ib: list[float] = []  # the InfiniBand counters of the last push (NODE_FIELDS[1:])
        self.last_pcie: tuple[float, ...] = ()  # PCIe replays and NVLink CRC of the last push, per GPU (NaN: none)
        self.last_crc: tuple[float, ...] = ()
        self.last_replay: tuple[float, ...] = ()  # NVLink replays and recoveries of the last push, per GPU
        # each GPU's (index, ecc_dbe_volatile, row_remap_failure, pci_bus_id) in the last sample (rules.remember)
        self.last_key: tuple[tuple[int, int | None, bool | None, str], ...] = ()

    # The rings, up to date: (size, fields, GPUs) float32 offsets, the bases, (size, node fields), (size, GPUs).
    @property
    def gpu(self) -> np.ndarray:
        self._settle()
        return self._gpu

    @property
    def base(self) -> np.ndarray:
        self._settle()
        return self._base

    @property
    def node(self) -> np.ndarray:
        self._settle()
        return self._node

    @property
    def throttle(self) -> np.ndarray:
        self._settle()
        return self._throttle

    @property
    def temp_c(self) -> np.ndarray:
        """A view of the temperature rows (the thermal rule reads it directly)."""
        return self.gpu[:, 0, :]

    @property
    def gpus(self) -> int:
        return int(self._gpu.shape[2])

    def _ensure_gpus(self, n: int) -> None:
        self._settle()  # staged samples have the old width
        have = self.gpus
        if n > have:
            grow = n - have
            self._gpu = np.concatenate([self._gpu, np.full((self.size, len(GPU_FIELDS), grow), np.nan,
                                                           dtype=np.float32)], axis=2)
            self._base = np.hstack([self._base, np.zeros((len(GPU_FIELDS), grow))])
            self._throttle = np.hstack([self._throttle, np.zeros((self.size, grow), dtype=np.int64)])

    def push(self, sample: SampleView) -> list[Any]:
        """Take the next sample (time order); return its GPU_FIELDS as columns across the window's GPUs (NaN: no
        reading, or the GPU is lost), which the rules' common cases read instead of the sample's GPUs."""
        gpus = sample.gpus
        width = self._gpu.shape[2]
        fast = len(gpus) == width
        if fast:
            # Read every field across the GPUs at once; nearly every sample has every GPU, in index order, none lost.
            index, state, *gauges, pending, throttles, widths, widths_max = zip(*map(_READ, gpus),
                                                                                 strict=False)  # equal lengths
            fast = index == _in_order(width) and _LOST not in state
        if fast:
            all_links = list(map(_NVLINKS, gpus))
            try:
                crc = [sum(map(_CRC, links)) if links else _NAN for links in all_links]
            except TypeError:  # some link had no reading (None)
                crc = [_crc_sum(links) if links else _NAN for links in all_links]
            retry = [_retry_sum(links) if links else _NAN for links in all_links]
            columns: list[Any] = [*gauges, crc, retry, pending, list(map(_downtrained, widths, widths_max))]
            try:
                self._staged.fromlist(list(itertools.chain.from_iterable(columns)))  # all or nothing
            except TypeError:  # some reading is None
                columns = [[_NAN if v is None else v for v in column] for column in columns]
                self._staged.fromlist(list(itertools.chain.from_iterable(columns)))
            throttle: list[int] = list(throttles) if None not in throttles else [t or 0 for t in throttles]
        else:
            columns, throttle = self._columns(gpus, width)
            self._staged.fromlist(list(itertools.chain.from_iterable(columns)))
        self._staged_throttle.fromlist(throttle)
        pcie: tuple[float, ...] = tuple(columns[_PCIE])
        links: tuple[float, ...] = tuple(columns[_NVLINK])
        retries: tuple[float, ...] = tuple(columns[_REPLAY])
        self.counters_moved = (True in columns[_PENDING] or 1.0 in columns[_DOWNTRAINED]
                               # counters unchanged (nearly always): equal, nothing rose
                               or (pcie != self.last_pcie and any(map(operator.gt, pcie, self.last_pcie)))
                               or (links != self.last_crc and any(map(operator.gt, links, self.last_crc)))
                               or (retries != self.last_replay and any(map(operator.gt, retries, self.last_replay))))
        self.last_pcie, self.last_crc, self.last_replay = pcie, links, retries
        ib = _infiniband(sample.nics)
        self._staged_node.append(sample.ts)
        self._staged_node.extend(ib)
        self.ib_moved = self.count > 0 and any(map(operator.gt, ib, self.last_ib))
        self.last_ib = ib
        self.count += 1
        self._pending += 1
        self.last_ts = sample.ts
        if self._pending >= min(STAGED, self.size):
            self._settle()
        return columns

    def _columns(self, gpus: list[GpuView], width: int) -> tuple[list[Any], list[int]]:
        """GPU_FIELDS as columns across GPUs (NaN: no reading, or the GPU is lost), and throttle reasons, for a
        sample with a lost GPU, GPUs missing or out of order, or more GPUs than the window had (it grows)."""
        rows = [_ABSENT] * width  # per GPU, GPU_FIELDS in order
        throttle = [0] * width
        for g in gpus:
            index = g.index
            if index >= width:
                self._ensure_gpus(index + 1)
                rows += [_ABSENT] * (index + 1 - width)
                throttle += [0] * (index + 1 - width)
                width = index + 1
            if g.state is GpuState.OK:
                values = _GAUGES(g)
                if None in values:
                    values = tuple(_NAN if v is None else v for v in values)
                crc = _crc_sum(g.nvlinks) if g.nvlinks else _NAN
                retry = _retry_sum(g.nvlinks) if g.nvlinks else _NAN
                pending = g.row_remap_pending
                rows[index] = (*values, crc, retry, _NAN if pending is None else float(pending),
                               _downtrained(g.pcie_link_width, g.pcie_link_width_max))
            throttle[index] = g.throttle_reasons or 0
        return list(zip(*rows, strict=True)), throttle

    def _settle(self) -> None:
        """Move the staged samples into the rings, in order."""
        k = self._pending
        if not k:
            return
        width, fields = self._gpu.shape[2], len(GPU_FIELDS)
        readings = np.frombuffer(self._staged, dtype=np.float64).reshape(k, fields, width)
        rows = (self.count - k + np.arange(k)) % self.size
        offsets = readings - self._base  # (k, fields, GPUs)
        with np.errstate(over="ignore"):  # a gauge beyond float32 (nonsense, but finite on the wire) reads inf
            if np.fmax.reduce(np.abs(offsets[:, _COUNTERS]), axis=None) < _EXACT:
                self._gpu[rows] = offsets  # the common case: no counter left float32's exact range
            else:
                for j in range(k):  # as one push at a time would: each reading against the base moved before it
                    offset = readings[j] - self._base
                    if (np.abs(offset[_COUNTERS]) >= _EXACT).any():
                        self._rebase(offset)
                    self._gpu[rows[j]] = offset
        self._throttle[rows] = np.frombuffer(self._staged_throttle, dtype=np.int64).reshape(k, width)
        self._node[rows] = np.frombuffer(self._staged_node, dtype=np.float64).reshape(k, len(NODE_FIELDS))
        del readings, offsets
        self._staged, self._staged_throttle, self._staged_node = array("d"), array("q"), array("d")
        self._pending = 0

    def _rebase(self, offset: np.ndarray) -> None:
        """Move the base of counters whose offset left float32's exact range to the new reading."""
        shift = np.zeros_like(offset)
        shift[_COUNTERS] = np.where(np.abs(offset[_COUNTERS]) >= _EXACT, offset[_COUNTERS], 0.0)
        self._base += shift
        offset -= shift
        with np.errstate(over="ignore"):  # a jump beyond float32's range leaves the older rows at -inf
            self._gpu -= shift.astype(np.float32)  # older rows keep float32's relative precision against the jump

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
