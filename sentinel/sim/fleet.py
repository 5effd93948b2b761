"""A vectorised simulated fleet: every GPU of every node as numpy arrays, advanced one step at a time, with the
faults of a scenario's ground truth (``sentinel.sim.groundtruth``) written into the readings and the kernel log.

Each fault class leaves its documented precursor and failure signature (``groundtruth.SIGNATURE``):
- hbm: correctable ECC climbs and row remaps go pending during the precursor; Xid 63 then 64 near the end;
  at failure Xid 48 (with a double-bit ECC count) or 94/95;
- thermal: the temperature ramps from normal to 105 C over the precursor, hardware thermal slowdown from 98 C;
  at failure the GPU is lost (Xid 79);
- nvlink: link CRC errors climb; from a point early in the precursor (``second_signal_at``) the link also replays
  flits, more as it degrades (the second signal DCGM's health watch fails a GPU on); at failure Xid 74;
- pcie: the PCIe replay counter climbs (when there is a precursor); from ``second_signal_at`` the link runs
  downtrained (x8 of x16); at failure Xid 79 and the GPU is lost;
- gsp: Xid 119 or 120 at failure; infiniband: symbol errors then link error recovery climb, link_downed at
  failure; fail_slow: the GPU's SM clock drops to 60 % from the failure time on; silent: Xid 79, GPU lost;
  software: nothing on the node (the job dies elsewhere);
- benign: app_xid logs Xid 13/31/43; spike lifts one GPU's temperature 15 C for one step; reboot changes the
  boot id and resets every counter; driver_reload resets the GPU counters and keeps the boot id; storm: the
  storm's Xid on each hit node.
Readings are produced as arrays (``step``) and converted to the wire records on demand (``samples``, ``logs``).
With the scenario's ``[background]`` on (the default), ``sentinel.sim.background`` adds what a healthy fleet does
every day and the precursors vary in strength and shape; off, the stream is the clean fleet's, bit for bit.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from sentinel.events import GpuReading, GpuState, LogEvent, LogKind, NicReading, NvLinkReading, TelemetrySample
from sentinel.sim.background import BackgroundSim, intensity, precursor_shape
from sentinel.sim.groundtruth import TruthEvent, node_name
from sentinel.sim.scenario import Scenario

SHUTDOWN_C, SLOWDOWN_C = 105.0, 98.0
PCIE_WIDTH = 16  # lanes of every GPU's PCIe link at full width (Gen5 x16)
HW_THERMAL_SLOWDOWN = 0x40
XID_TEXT = {13: "Graphics SM Warp Exception", 31: "MMU Fault", 43: "Ch 00000010 reset", 48: "DBE", 63: "row remap",
            64: "row remap failure", 74: "NVLink: fatal error", 79: "GPU has fallen off the bus.",
            94: "Contained ECC error", 95: "Uncontained ECC error", 119: "Timeout waiting for RPC from GSP!",
            120: "GSP Error"}


@dataclass
class Step:
    """One step of the whole fleet: arrays indexed [node, gpu] (or [node] for the InfiniBand port)."""

    t_s: float
    temp_c: np.ndarray
    power_w: np.ndarray
    util_pct: np.ndarray
    sm_clock_mhz: np.ndarray
    throttle: np.ndarray
    lost: np.ndarray
    ecc_sbe: np.ndarray
    ecc_dbe: np.ndarray
    remap_pending: np.ndarray
    pcie_replay: np.ndarray
    nvlink_crc: np.ndarray
    nvlink_replay: np.ndarray  # replay plus recovery errors over the GPU's links
    pcie_downtrained: np.ndarray  # 1.0 where the PCIe link runs narrower than its maximum width
    ib_symbol_error: np.ndarray
    ib_link_error_recovery: np.ndarray
    ib_link_downed: np.ndarray
    boot: np.ndarray
    job: np.ndarray  # job id per node, -1 when idle (the scheduler's view: who are whose peers)
    ib_xmit_words: np.ndarray  # InfiniBand port_xmit_data (4-byte words), follows the step rhythm
    logs: list[tuple[int, int, int, str]] = field(default_factory=list)  # (node, gpu, xid, text)
    # Delivery of the agents' samples this step (background.telemetry), per node; None on a clean fleet.
    delivery: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (missing, duplicated, late)
    nvlink_recovery: np.ndarray | None = None  # the recovery part of nvlink_replay (the link retrained)


class Fleet:
    def __init__(self, scenario: Scenario, truth: list[TruthEvent], start_ts: float = 1_767_225_600.0) -> None:
        self.sc = scenario
        self.start_ts = start_ts
        n, g = scenario.nodes, scenario.gpus_per_node
        rng = self.rng = np.random.default_rng(scenario.seed + 1)
        groups = (n + scenario.job_nodes - 1) // scenario.job_nodes
        self.group_busy = rng.random(groups) < scenario.busy_fraction
        self.group_until = rng.exponential(scenario.job_mean_s, groups)
        self.group_started = -rng.uniform(0, scenario.job_mean_s, groups)
        self.group_phase = rng.uniform(0, 30.0, groups)
        self.group_job = np.where(self.group_busy, np.arange(groups), -1)
        self.next_job = groups
        self.node_group = np.arange(n) // scenario.job_nodes
        self.xmit = np.zeros(n, np.int64)
        self.temp_offset = rng.normal(0.0, 2.0, (n, g))
        self.power_offset = rng.normal(0.0, 12.0, (n, g))
        self.t_s = 0.0
        self.ecc_sbe = np.zeros((n, g), np.int64)
        self.ecc_dbe = np.zeros((n, g), np.int64)
        self.pcie_replay = np.zeros((n, g), np.int64)
        self.nvlink_crc = np.zeros((n, g), np.int64)
        self.nvlink_replay = np.zeros((n, g), np.int64)
        self.nvlink_recovery = np.zeros((n, g), np.int64)
        self.pcie_width = np.full((n, g), PCIE_WIDTH, np.int64)
        self.ib = np.zeros((3, n), np.int64)  # symbol_error, link_error_recovery, link_downed
        self.lost = np.zeros((n, g), bool)
        self.remap_pending = np.zeros((n, g), bool)
        self.boot = np.zeros(n, np.int64)
        self.slow = np.zeros((n, g), bool)
        self.index = {node_name(i): i for i in range(n)}
        self.truth = truth
        self.bg = BackgroundSim(scenario, truth, self.index) if scenario.background.enabled else None
        if self.bg is not None:
            self.bg.job_started(np.arange(groups), groups)
        self._shapes: dict[str, tuple[float, str, float]] = {}
        self._second: dict[str, float] = {}
        self._rngs: dict[str, np.random.Generator] = {}  # per link fault: its own stream, so the fleet's is unchanged
        self._late: dict[int, TelemetrySample] = {}
        self._pending = sorted(truth, key=lambda e: e.precursor_start_s)  # not started yet
        self._active: list[TruthEvent] = []  # in precursor, or failing this step
        self._fired: set[tuple[str, str]] = set()

    def _once(self, event: TruthEvent, tag: str) -> bool:
        key = (event.id, tag)
        if key in self._fired:
            return False
        self._fired.add(key)
        return True

    def step(self) -> Step:
        """Advance by ``step_s`` and return every reading of the fleet at the new time."""
        sc, rng = self.sc, self.rng
        self.t_s += sc.step_s
        t, dt = self.t_s, sc.step_s
        self._schedule(t)
        group = self.node_group
        busy_nodes = self.group_busy[group]
        busy = busy_nodes[:, None]
        # The training step rhythm: a job's peers move together; each job has its own phase.
        phase = np.sin(2 * np.pi * (t + self.group_phase[group]) / 30.0)[:, None]
        since = (t - self.group_started[group]) % sc.checkpoint_interval_s  # checkpoint at the end of each interval
        in_checkpoint = busy_nodes & (since >= sc.checkpoint_interval_s - sc.checkpoint_s)
        load = np.where(in_checkpoint, 0.1, 1.0)[:, None]
        # One slow GPU holds the whole job back: its peers wait at every collective.
        group_slow = np.zeros(len(self.group_busy), bool)
        np.logical_or.at(group_slow, group, self.slow.any(axis=1))
        load = load * np.where(group_slow[group] & busy_nodes, 0.6, 1.0)[:, None]
        if self.bg is not None:
            load = load * self.bg.load(t, group, self.group_started)[:, None]
        temp = np.where(busy, 34.0 + (33.0 + 1.5 * phase) * load, 34.0) + self.temp_offset + rng.normal(
            0, sc.noise.temp_sd_c, self.temp_offset.shape)
        power = np.where(busy, 72.0 + (538.0 + 40.0 * phase) * load, 72.0) + self.power_offset + rng.normal(
            0, sc.noise.power_sd_w, self.power_offset.shape)
        util = np.where(busy, np.clip(rng.normal(96.0, 2.0, temp.shape) * load, 0, 100), 0.0)
        clock = np.where(busy, 1980.0, 345.0) * np.ones_like(temp)
        # ~25 GB/s per busy node at full load, counted in 4-byte words like port_xmit_data
        self.xmit += (util.mean(axis=1) / 100.0 * 25e9 / 4 * dt).astype(np.int64)
        throttle = np.zeros(temp.shape, np.int64)
        self.ecc_sbe += rng.random(temp.shape) < 0.0005 * dt / 10  # background: a rare correctable error
        logs: list[tuple[int, int, int, str]] = []
        delivery = None
        if self.bg is not None:
            self.bg.environment(t, temp, power, clock, throttle, busy_nodes)
            self.bg.counters(t, dt, [self.ecc_sbe, self.pcie_replay, self.nvlink_crc, self.ib[0], self.ib[1],
                                     self.nvlink_recovery], self.remap_pending, logs)
            delivery = self.bg.delivery(t)
        while self._pending and self._pending[0].precursor_start_s <= t:
            self._active.append(self._pending.pop(0))
        for event in self._active:
            self._apply(event, t, dt, temp, clock, throttle, logs)
        self._active = [e for e in self._active if e.failure_s > t]  # a failure acts once, at its first step
        clock = np.where(self.slow, clock * 0.6, clock)
        temp = np.where(self.lost, np.nan, temp)
        return Step(t, temp, power, util, clock, throttle, self.lost.copy(), self.ecc_sbe.copy(), self.ecc_dbe.copy(),
                    self.remap_pending.copy(), self.pcie_replay.copy(), self.nvlink_crc.copy(),
                    self.nvlink_replay + self.nvlink_recovery, (self.pcie_width < PCIE_WIDTH).astype(float),
                    self.ib[0].copy(),
                    self.ib[1].copy(), self.ib[2].copy(), self.boot.copy(), self.group_job[group].copy(),
                    self.xmit.copy(), logs, delivery, self.nvlink_recovery.copy())

    def _schedule(self, t: float) -> None:
        """Jobs end and new ones start: busy for ~job_mean_s, then idle for a gap that keeps the long-run busy
        share at busy_fraction (longer at night with daily_amplitude)."""
        sc, rng = self.sc, self.rng
        for g in np.flatnonzero(self.group_until <= t):
            if self.group_busy[g]:
                night = 0.5 * (1 + np.cos(2 * np.pi * t / 86_400.0))  # 1 at midnight, 0 at noon
                idle_mean = sc.job_mean_s * (1 - sc.busy_fraction) / sc.busy_fraction
                weekend = (t // 86_400.0) % 7 >= 5
                factor = (1 + sc.daily_amplitude * night) * (1 + sc.weekly_amplitude * weekend)
                gap = rng.exponential(max(idle_mean * factor, 1.0))
                self.group_busy[g], self.group_job[g], self.group_until[g] = False, -1, t + gap
            else:
                self.group_busy[g], self.group_job[g] = True, self.next_job
                self.next_job += 1
                self.group_started[g], self.group_until[g] = t, t + rng.exponential(sc.job_mean_s)
                self.group_phase[g] = rng.uniform(0, 30.0)
                if self.bg is not None:
                    self.bg.job_started(np.array([g]), len(self.group_busy))

    def _apply(self, e: TruthEvent, t: float, dt: float, temp: np.ndarray, clock: np.ndarray, throttle: np.ndarray,
               logs: list[tuple[int, int, int, str]]) -> None:
        node, gpu = self.index[e.node], max(e.gpu, 0)
        failed = t >= e.failure_s
        span = max(e.failure_s - e.precursor_start_s, dt)
        progress = min(max((t - e.precursor_start_s) / span, 0.0), 1.0)
        # How the precursor shows: a ramp of strength 1 on a clean fleet; varied with the background on.
        strength, level = 1.0, progress
        if self.bg is not None:
            if e.id not in self._shapes:
                self._shapes[e.id] = precursor_shape(self.sc.background, e.id)
            strength, shape, step_at = self._shapes[e.id]
            level = intensity(shape, progress, step_at, t)

        def xid(code: int) -> None:
            logs.append((node, gpu, code, XID_TEXT.get(code, "error")))

        if e.cls == "hbm":
            if not failed:
                self.ecc_sbe[node, gpu] += int(self.rng.poisson(strength * (0.5 + 10 * level)))
                self.remap_pending[node, gpu] = progress > 0.3
                if progress > 0.6 and self._once(e, "63"):
                    xid(63)
                if progress > 0.9 and self._once(e, "64"):
                    xid(64)
            elif self._once(e, "fail"):
                drawn = int(self.rng.choice([48, 94, 95]))  # drawn even when the plan chose: the stream stays
                code = e.failure_xid or drawn
                self.ecc_dbe[node, gpu] += 1 if code == 48 else 0
                xid(code)
        elif e.cls == "thermal":
            if not failed:
                base = temp[node, gpu]
                rise = progress if self.bg is None else _thermal_rise(self._shapes[e.id], progress)
                temp[node, gpu] = base + rise * max(SHUTDOWN_C - base, 0.0)
                if temp[node, gpu] >= SLOWDOWN_C:
                    throttle[node, gpu] |= HW_THERMAL_SLOWDOWN
                    clock[node, gpu] *= 0.6
            elif self._once(e, "fail"):
                self.lost[node, gpu] = True
                xid(79)
        elif e.cls == "nvlink":
            if not failed:
                self.nvlink_crc[node, gpu] += int(self.rng.poisson(strength * (1 + 50 * level)))
                if progress >= self._second_at(e):
                    self.nvlink_replay[node, gpu] += int(self._event_rng(e).poisson(strength * (0.2 + 2 * level)))
            elif self._once(e, "fail"):
                xid(74)
        elif e.cls == "pcie":
            if not failed:
                self.pcie_replay[node, gpu] += int(self.rng.poisson(strength * (1 + 20 * level)))
                if progress >= self._second_at(e):
                    self.pcie_width[node, gpu] = PCIE_WIDTH // 2
            elif self._once(e, "fail"):
                self.lost[node, gpu] = True
                xid(79)
        elif e.cls == "infiniband":
            if not failed:
                self.ib[0, node] += int(self.rng.poisson(strength * (5 + 200 * level)))
                self.ib[1, node] += int(progress > 0.5 and self.rng.random() < 0.3)
            elif self._once(e, "fail"):
                self.ib[2, node] += 1
        elif e.cls == "fail_slow" and failed:
            self.slow[node, gpu] = True
        elif e.cls == "gsp" and failed and self._once(e, "fail"):
            xid(int(self.rng.choice([119, 120])))
        elif e.cls == "silent" and failed and self._once(e, "fail"):
            self.lost[node, gpu] = True
            xid(79)
        elif e.cls == "app_xid" and failed and self._once(e, "fail"):
            xid(int(self.rng.choice([13, 31, 43])))
        elif e.cls == "spike" and failed and self._once(e, "fail"):
            temp[node, gpu] += 15.0
        elif e.cls == "reboot" and failed and self._once(e, "fail"):
            self.boot[node] += 1
            for counters in (self.ecc_sbe, self.ecc_dbe, self.pcie_replay, self.nvlink_crc, self.nvlink_replay,
                             self.nvlink_recovery):
                counters[node, :] = 0
            self.pcie_width[node, :] = PCIE_WIDTH  # links train again at boot
            self.ib[:, node] = 0
            self.xmit[node] = 0
            self.lost[node, :] = False
        elif e.cls == "driver_reload" and failed and self._once(e, "fail"):
            for counters in (self.ecc_sbe, self.ecc_dbe, self.pcie_replay, self.nvlink_crc, self.nvlink_replay,
                             self.nvlink_recovery):
                counters[node, :] = 0  # the driver starts counting again; the boot id stays
        elif e.kind == "storm" and failed and self._once(e, "fail"):
            xid(int(e.cls.removeprefix("storm-xid")))

    def _second_at(self, e: TruthEvent) -> float:
        """Where in its precursor a link fault's second physical signal starts (assumption: in its first 5-40 %;
        no public timing), drawn from the event's id so it never depends on order or on the fleet's stream."""
        if e.id not in self._second:
            self._second[e.id] = float(self._event_rng(e).uniform(0.05, 0.4))
        return self._second[e.id]

    def _event_rng(self, e: TruthEvent) -> np.random.Generator:
        key = f"rng:{e.id}"
        if key not in self._rngs:
            self._rngs[key] = np.random.default_rng(zlib.crc32(f"second-signal:{e.id}".encode()))
        return self._rngs[key]

    def samples(self, step: Step, nodes: list[int] | None = None) -> list[TelemetrySample]:
        """The step as the agents would send it: one TelemetrySample per node (all, or the given indices). With
        the background on, some never arrive, some arrive twice, some a step late (after the next one), node
        clocks are skewed, and some nodes' GPUs report no NVLink or row-remap fields."""
        ts = self.start_ts + step.t_s
        out = []
        chosen = range(self.sc.nodes) if nodes is None else nodes
        for i in chosen:
            late = self._late.pop(i, None)
            if step.delivery is not None and step.delivery[0][i]:
                if late is not None:
                    out.append(late)
                continue
            sample = self._sample(step, i, ts)
            if step.delivery is not None and step.delivery[2][i]:
                self._late[i] = sample  # held back: arrives after the next sample of its node
            else:
                out.append(sample)
                if step.delivery is not None and step.delivery[1][i]:
                    out.append(sample)
            if late is not None:
                out.append(late)
        return out

    def _sample(self, step: Step, i: int, ts: float) -> TelemetrySample:
        bg = self.bg
        unsupported = bg is not None and bool(bg.unsupported[i])
        recovery = step.nvlink_recovery if step.nvlink_recovery is not None else np.zeros_like(step.nvlink_replay)
        gpus = []
        for j in range(self.sc.gpus_per_node):
            pci = f"00000000:{0x18 + j:02X}:00.0"
            if step.lost[i, j]:
                gpus.append(GpuReading(index=j, pci_bus_id=pci, state=GpuState.LOST))
                continue
            gpus.append(GpuReading(
                index=j, pci_bus_id=pci, temp_c=round(float(step.temp_c[i, j]), 2),
                power_w=round(float(step.power_w[i, j]), 1), power_limit_w=700.0,
                sm_clock_mhz=float(step.sm_clock_mhz[i, j]), util_gpu_pct=round(float(step.util_pct[i, j]), 1),
                throttle_reasons=int(step.throttle[i, j]), ecc_sbe_volatile=int(step.ecc_sbe[i, j]),
                ecc_dbe_volatile=int(step.ecc_dbe[i, j]),
                row_remap_pending=None if unsupported else bool(step.remap_pending[i, j]),
                pcie_replay=int(step.pcie_replay[i, j]), pcie_link_gen=5, pcie_link_gen_max=5,
                pcie_link_width=PCIE_WIDTH // 2 if step.pcie_downtrained[i, j] else PCIE_WIDTH,
                pcie_link_width_max=PCIE_WIDTH,
                nvlinks=[] if unsupported else [NvLinkReading(
                    link=0, active=True, crc_errors=int(step.nvlink_crc[i, j]),
                    replay_errors=int(step.nvlink_replay[i, j] - recovery[i, j]),
                    recovery_errors=int(recovery[i, j]))]))
        nic = NicReading(name="mlx5_0/1", link_layer="infiniband", state="4: ACTIVE", carrier=True,
                         counters={"port_xmit_data": int(step.ib_xmit_words[i]),
                                   "symbol_error": int(step.ib_symbol_error[i]),
                                   "link_error_recovery": int(step.ib_link_error_recovery[i]),
                                   "link_downed": int(step.ib_link_downed[i])})
        jobs = [f"sim-job-{int(step.job[i])}"] if step.job[i] >= 0 else []
        skew = 0.0 if bg is None else round(float(bg.skew_s[i]), 3)
        return TelemetrySample(node=node_name(i), ts=ts + skew, seq=int(step.t_s / self.sc.step_s), gpus=gpus,
                               nics=[nic], jobs=jobs)

    def logs(self, step: Step) -> list[LogEvent]:
        ts = self.start_ts + step.t_s
        out = []
        for node, gpu, code, text in step.logs:
            pci = f"0000:{0x18 + gpu:02x}:00"
            out.append(LogEvent(node=node_name(node), ts=ts, kind=LogKind.XID, xid=code, pci_bus_id=pci,
                                message=f"NVRM: Xid (PCI:{pci}): {code}, pid='<unknown>', {text}"))
        return out


def _thermal_rise(shape: tuple[float, str, float], progress: float) -> float:
    """Share of the climb to shutdown reached at ``progress``: a ramp; a step (cooling partly fails at the step
    point, then the rest); or a slow start that speeds up (what a "bursts" draw means for a temperature)."""
    _, kind, step_at = shape
    if kind == "step":
        return 0.1 * progress if progress < step_at else 0.4 + 0.6 * progress
    if kind == "bursts":
        return progress * progress
    return progress
