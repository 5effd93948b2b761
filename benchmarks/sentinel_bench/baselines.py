"""The baselines ``bench detect`` and ``bench goodput`` score Sentinel against, and the signal each system gives.

``ThresholdBaseline``: static thresholds as existing tools ship them (domain.md); ``ReactiveBaseline``: react on
the crash itself.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from sentinel.counters import counter_delta
from sentinel.events import GpuState, LogEvent, TelemetrySample

# AWS EKS node-health: Xids that mark a node unhealthy (domain.md) - the static list existing tools act on.
EKS_XIDS = {46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158}
CRASH_XIDS = {48, 74, 79, 94, 95, 119, 120}  # the failure itself: what a react-on-crash setup sees




@dataclass(frozen=True)
class Signal:
    node: str
    ts_s: float  # seconds from the start of the run
    drain: bool  # False: an alert only
    why: str = ""  # the rule or decision reason, for the false-signal breakdown
    checkpoint: bool = False  # a drain that asked the job to checkpoint first


class ThresholdBaseline:
    """Static thresholds as existing tools ship them (domain.md), acting on everything they see, background
    included. Drains: the EKS Xid list, Azure healthagent's DBE > 0 and row-remap failure, NVSentinel's
    link_downed increase and symbol errors > 120/h. Alerts (once per episode): temperature > 93 C and a pending
    row remap (Azure), PCIe replays > 8/min and NVLink CRC > 100/s (DCGM), link_error_recovery > 5/min
    (NVSentinel)."""

    def __init__(self) -> None:
        self.prev: dict[str, TelemetrySample] = {}
        self.history: dict[tuple[str, str], deque[tuple[float, int]]] = {}  # (node, counter) -> (t, increase)
        self.open: set[tuple[str, str]] = set()

    def _rate(self, node: str, name: str, t: float, increase: int | None, window_s: float) -> float:
        """Increase of a counter over the trailing ``window_s`` (a reset counts as no increase)."""
        history = self.history.setdefault((node, name), deque())
        if increase:
            history.append((t, increase))
        while history and history[0][0] <= t - window_s:
            history.popleft()
        return float(sum(d for _, d in history))

    def _edge(self, node: str, key: str, on: bool, t: float, drain: bool, why: str) -> list[Signal]:
        if not on:
            self.open.discard((node, key))
            return []
        if (node, key) in self.open:
            return []
        self.open.add((node, key))
        return [Signal(node, t, drain, why)]

    def sample(self, s: TelemetrySample, t: float) -> list[Signal]:
        out, prev = [], self.prev.get(s.node)
        for gpu in s.gpus:
            old = next((g for g in prev.gpus if g.index == gpu.index), None) if prev else None
            if (counter_delta(old.ecc_dbe_volatile if old else None, gpu.ecc_dbe_volatile) or 0) > 0 or \
                    gpu.row_remap_failure:
                out.append(Signal(s.node, t, True, "dbe-or-row-remap-failure"))
            g = f"gpu{gpu.index}"
            out += self._edge(s.node, f"{g}-hot", gpu.temp_c is not None and gpu.temp_c > 93, t, False, "temp>93C")
            out += self._edge(s.node, f"{g}-pending", bool(gpu.row_remap_pending), t, False, "row-remap-pending")
            replays = self._rate(s.node, f"{g}-pcie", t, counter_delta(old.pcie_replay if old else None,
                                                                       gpu.pcie_replay), 60.0)
            out += self._edge(s.node, f"{g}-pcie", replays > 8, t, False, "pcie-replay>8/min")
            crc_old = sum(x.crc_errors or 0 for x in old.nvlinks) if old and old.nvlinks else None
            crc_new = sum(x.crc_errors or 0 for x in gpu.nvlinks) if gpu.nvlinks else None
            crc = self._rate(s.node, f"{g}-crc", t, counter_delta(crc_old, crc_new), 60.0)
            out += self._edge(s.node, f"{g}-crc", crc > 100 * 60, t, False, "nvlink-crc>100/s")
        for nic in s.nics:
            old_nic = next((n for n in prev.nics if n.name == nic.name), None) if prev else None

            def delta(name: str, old_nic: Any = old_nic, nic: Any = nic) -> int | None:
                return counter_delta(old_nic.counters.get(name), nic.counters.get(name)) if old_nic else None

            if delta("link_downed"):
                out.append(Signal(s.node, t, True, "link_downed"))
            symbols = self._rate(s.node, f"{nic.name}-symbol", t, delta("symbol_error"), 3600.0)
            out += self._edge(s.node, f"{nic.name}-symbol", symbols > 120, t, True, "symbol_error>120/h")
            recoveries = self._rate(s.node, f"{nic.name}-recovery", t, delta("link_error_recovery"), 60.0)
            out += self._edge(s.node, f"{nic.name}-recovery", recoveries > 5, t, False, "link_error_recovery>5/min")
        self.prev[s.node] = s
        return out

    def log(self, e: LogEvent, t: float) -> list[Signal]:
        return [Signal(e.node, t, True, f"xid {e.xid}")] if e.xid in EKS_XIDS else []


class ReactiveBaseline:
    """React on the crash: drain when the GPU is lost, the link is down, or the failure Xid itself is logged."""

    def __init__(self) -> None:
        self.lost: set[tuple[str, int]] = set()
        self.downed: dict[str, int] = {}

    def sample(self, s: TelemetrySample, t: float) -> list[Signal]:
        out = []
        for gpu in s.gpus:
            if gpu.state is GpuState.LOST and (s.node, gpu.index) not in self.lost:
                self.lost.add((s.node, gpu.index))
                out.append(Signal(s.node, t, True, "gpu lost"))
        for nic in s.nics:
            downed = nic.counters.get("link_downed", 0)
            if downed > self.downed.get(s.node, downed):
                out.append(Signal(s.node, t, True, "link_downed"))
            self.downed[s.node] = downed
        return out

    def log(self, e: LogEvent, t: float) -> list[Signal]:
        return [Signal(e.node, t, True, f"xid {e.xid}")] if e.xid in CRASH_XIDS else []
