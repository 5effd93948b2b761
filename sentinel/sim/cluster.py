"""A minimal simulated GPU cluster: N nodes x G GPUs with plausible readings, multi-node jobs and faults.

It emits exactly what agents emit (TelemetrySample per node per interval, LogEvent per kernel-log line), so the
detector cannot tell it from a fleet. The detector never imports this package.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from sentinel.clock import ManualClock
from sentinel.events import GpuReading, GpuState, HostReading, LogEvent, LogKind, TelemetrySample
from sentinel.sim.faults import (
    THERMAL_RISE_C_PER_S,
    THERMAL_SHUTDOWN_C,
    THERMAL_SLOWDOWN_C,
    XID_TEXT,
    Fault,
    FaultKind,
    xid_line,
)
from sentinel.sim.scheduler import SimScheduler

HBM_BYTES = 80 * 1024**3
HW_THERMAL_SLOWDOWN = 0x40
THERMAL_TIME_CONSTANT_S = 60.0


@dataclass
class SimGpu:
    index: int
    uuid: str
    pci_bus_id: str
    temp_offset_c: float
    power_offset_w: float
    state: GpuState = GpuState.OK
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    pcie_replay: int = 0
    runaway_since: float | None = None
    temp_c: float | None = None  # die temperature follows its target with a thermal lag
    temp_ts: float | None = None


@dataclass
class SimEvent:
    """Something that happened in the simulated world (ground truth for the demo's timeline)."""

    ts: float
    node: str
    what: str
    fault: Fault | None = None
    job: str | None = None


@dataclass
class SimNodeState:
    name: str
    gpus: list[SimGpu]
    boot_id: str
    seq: int = 0
    pending_logs: list[LogEvent] = field(default_factory=list)


class SimCluster:
    def __init__(
        self,
        nodes: int,
        gpus_per_node: int,
        clock: ManualClock,
        scheduler: SimScheduler | None,
        faults: list[Fault],
        seed: int = 0,
        node_prefix: str = "gpu-node-",
    ) -> None:
        self.clock = clock
        self.rng = random.Random(seed)
        names = [f"{node_prefix}{i:03d}" for i in range(1, nodes + 1)]
        self.nodes = {name: self._make_node(name, gpus_per_node, n) for n, name in enumerate(names)}
        self.scheduler = scheduler if scheduler is not None else SimScheduler(names, clock)
        self.pending_faults = sorted(faults, key=lambda f: f.onset_ts)
        self.faults = list(self.pending_faults)
        self.events: list[SimEvent] = []

    def _make_node(self, name: str, gpus: int, n: int) -> SimNodeState:
        made = [
            SimGpu(
                index=i,
                uuid=f"GPU-{self.rng.getrandbits(64):016x}",
                pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                temp_offset_c=self.rng.gauss(0, 2.0),
                power_offset_w=self.rng.gauss(0, 12.0),
            )
            for i in range(gpus)
        ]
        return SimNodeState(name, made, boot_id=f"{self.rng.getrandbits(128):032x}")

    def tick(self) -> tuple[list[TelemetrySample], list[LogEvent]]:
        """Advance the world to ``clock.now()``: start due faults, then read every node once."""
        now = self.clock.now()
        while self.pending_faults and self.pending_faults[0].onset_ts <= now:
            self._start(self.pending_faults.pop(0), now)
        samples = [self._sample(node, now) for node in self.nodes.values()]
        logs = [event for node in self.nodes.values() for event in node.pending_logs]
        for node in self.nodes.values():
            node.pending_logs.clear()
        return samples, logs

    def _log_xid(self, node: SimNodeState, gpu: SimGpu, xid: int, ts: float) -> None:
        line = xid_line(xid, gpu.pci_bus_id, XID_TEXT[xid])
        node.pending_logs.append(
            LogEvent(node=node.name, ts=ts, kind=LogKind.XID, message=line, xid=xid, pci_bus_id=gpu.pci_bus_id[4:-2])
        )

    def _start(self, fault: Fault, now: float) -> None:
        node = self.nodes[fault.node]
        gpu = node.gpus[fault.gpu]
        self.events.append(
            SimEvent(fault.onset_ts, fault.node, f"fault injected: {fault.kind} on GPU {fault.gpu}", fault)
        )
        if fault.kind is FaultKind.XID79:
            self._lose(node, gpu, fault, fault.onset_ts)
        elif fault.kind is FaultKind.XID48:
            gpu.ecc_dbe += 1
            self._log_xid(node, gpu, 48, fault.onset_ts)
            self._crash(node, fault, fault.onset_ts)
        elif fault.kind is FaultKind.THERMAL:
            gpu.runaway_since = fault.onset_ts
        elif fault.kind is FaultKind.XID13:
            self._log_xid(node, gpu, 13, fault.onset_ts)

    def _lose(self, node: SimNodeState, gpu: SimGpu, fault: Fault, ts: float) -> None:
        gpu.state = GpuState.LOST
        self._log_xid(node, gpu, 79, ts)
        self._crash(node, fault, ts)

    def _crash(self, node: SimNodeState, fault: Fault, ts: float) -> None:
        job = self.scheduler.crash_job_on(node.name)
        if job is not None:
            self.events.append(SimEvent(ts, node.name, f"job {job} crashed", fault, job))

    def _sample(self, node: SimNodeState, now: float) -> TelemetrySample:
        busy = self.scheduler.nodes[node.name].job is not None
        readings = [self._gpu(node, gpu, busy, now) for gpu in node.gpus]
        node.seq += 1
        host = HostReading(
            boot_id=node.boot_id,
            load1=round(32 * busy + self.rng.random(), 2),
            cpu_util_pct=round(60 * busy + 2 * self.rng.random(), 1),
            mem_total_bytes=2048 * 1024**3,
            mem_available_bytes=(1200 - 600 * busy) * 1024**3,
        )
        return TelemetrySample(node=node.name, ts=now, seq=node.seq, gpus=readings, host=host)

    def _gpu(self, node: SimNodeState, gpu: SimGpu, busy: bool, now: float) -> GpuReading:
        if gpu.state is GpuState.LOST:
            return GpuReading(
                index=gpu.index,
                uuid=gpu.uuid,
                pci_bus_id=gpu.pci_bus_id,
                model="NVIDIA H100 80GB HBM3",
                state=GpuState.LOST,
            )
        rng = self.rng
        target = (67.0 if busy else 34.0) + gpu.temp_offset_c
        if gpu.runaway_since is not None:
            target += THERMAL_RISE_C_PER_S * (now - gpu.runaway_since)
        if gpu.temp_c is None or gpu.temp_ts is None:
            gpu.temp_c = target
        else:  # first-order lag: a GPU heats up or cools down over about a minute, not instantly
            gpu.temp_c += (target - gpu.temp_c) * (1.0 - math.exp(-(now - gpu.temp_ts) / THERMAL_TIME_CONSTANT_S))
        gpu.temp_ts = now
        temp = gpu.temp_c + rng.gauss(0, 0.6)
        throttle = 0
        clock_mhz = 1980.0 if busy else 345.0
        if gpu.runaway_since is not None:
            if temp >= THERMAL_SLOWDOWN_C:
                throttle |= HW_THERMAL_SLOWDOWN
                clock_mhz *= 0.6
            if temp >= THERMAL_SHUTDOWN_C:
                fault = next(f for f in self.faults if f.node == node.name and f.gpu == gpu.index)
                self.events.append(SimEvent(now, node.name, f"GPU {gpu.index} thermal shutdown", fault))
                self._lose(node, gpu, fault, now)
                return self._gpu(node, gpu, busy, now)
        if rng.random() < 0.01:
            gpu.ecc_sbe += 1
        if rng.random() < 0.005:
            gpu.pcie_replay += 1
        power = (610.0 if busy else 72.0) + gpu.power_offset_w + rng.gauss(0, 8.0)
        util = min(100.0, max(0.0, rng.gauss(96, 2))) if busy else 0.0
        return GpuReading(
            index=gpu.index,
            uuid=gpu.uuid,
            pci_bus_id=gpu.pci_bus_id,
            model="NVIDIA H100 80GB HBM3",
            temp_c=round(temp, 2),
            mem_temp_c=round(temp + 4.0, 2),
            power_w=round(power, 1),
            power_limit_w=700.0,
            sm_clock_mhz=clock_mhz,
            mem_clock_mhz=2619.0,
            util_gpu_pct=round(util, 1),
            util_mem_pct=round(util * 0.45, 1),
            mem_used_bytes=int(HBM_BYTES * (0.9 if busy else 0.01)),
            mem_total_bytes=HBM_BYTES,
            throttle_reasons=throttle,
            ecc_sbe_volatile=gpu.ecc_sbe,
            ecc_dbe_volatile=gpu.ecc_dbe,
            ecc_sbe_aggregate=gpu.ecc_sbe,
            ecc_dbe_aggregate=gpu.ecc_dbe,
            retired_pages_pending=0,
            row_remap_failure=False,
            pcie_replay=gpu.pcie_replay,
        )
