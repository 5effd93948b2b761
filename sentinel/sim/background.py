"""The healthy-fleet background, generated: what ``[background]`` (``background_spec``) describes, written into
the fleet's arrays step by step.

Everything random here comes from one stream of its own (keyed by the scenario's seed), so the clean fleet
(``enabled = false``) is the same stream bit for bit. Episodes (bursts, remaps, power brakes, fan events,
lemon flaps, fault-like episodes that recover) are drawn for the whole run up front and applied while active;
per-step work is a few vector operations over the active ones, so generation stays fast at fleet scale.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from sentinel.sim.background_spec import Background
from sentinel.sim.groundtruth import TruthEvent
from sentinel.sim.scenario import Scenario

DAY_S = 86_400.0
HW_POWER_BRAKE = 0x80
EXCURSION_MAX_C = 91.0  # a thermal excursion that ends stays below the 93 C warning line

# Counter fields an episode can drive (index into BackgroundSim.counter_targets).
ECC, PCIE, NVLINK, IB_SYMBOL, IB_RECOVERY, NVLINK_RETRAIN = range(6)
# State episodes.
BRAKE, FAN, REMAP, EXCURSION = range(4)
# Job profiles.
TRAINING, INFERENCE, BURN_IN, IDLE = range(4)
PROFILE_LOAD = np.array([1.0, 0.55, 1.12, 0.04])


def stream(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(f"background:{name}".encode())])


@dataclass
class Episodes:
    """Episodes as parallel arrays: what, where, when and how much."""

    what: np.ndarray
    node: np.ndarray
    gpu: np.ndarray
    start: np.ndarray
    end: np.ndarray
    amount: np.ndarray
    ramp: np.ndarray  # True: the rate climbs over the episode (a precursor-like shape); False: flat

    @classmethod
    def join(cls, parts: list[Episodes]) -> Episodes:
        if not parts:
            empty = np.zeros(0)
            return cls(empty.astype(int), empty.astype(int), empty.astype(int), empty, empty, empty,
                       empty.astype(bool))
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.__dataclass_fields__))


def _poisson_times(rng: np.random.Generator, rate_per_unit_day: float, units: int, duration_s: float) -> np.ndarray:
    count = int(rng.poisson(rate_per_unit_day * units * duration_s / DAY_S))
    return rng.uniform(0.0, duration_s, count)


def _episodes(rng: np.random.Generator, what: int, times: np.ndarray, n: int, g: int,
              duration: tuple[float, float], amount: np.ndarray | float, ramp: bool = False,
              node: np.ndarray | None = None, gpu: np.ndarray | None = None) -> Episodes:
    k = len(times)
    nodes = rng.integers(n, size=k) if node is None else node
    gpus = rng.integers(g, size=k) if gpu is None else gpu
    length = rng.uniform(*duration, k)
    return Episodes(np.full(k, what), nodes, gpus, times, times + length, np.broadcast_to(amount, (k,)).astype(float),
                    np.full(k, ramp))


def _bursts(rng: np.random.Generator, what: int, per_1000: float, units: int, duration_s: float, n: int, g: int,
            length: tuple[float, float], median: float, sigma: float) -> Episodes:
    times = _poisson_times(rng, per_1000 / 1000, units, duration_s)
    return _episodes(rng, what, times, n, g, length, rng.lognormal(np.log(max(median, 1e-9)), sigma, len(times)))


def lemon_gpus(sc: Scenario, truth: list[TruthEvent], index: dict[str, int]) -> list[tuple[int, int, float]]:
    """Lemon GPUs as (node, gpu, flapping until s): a share of healthy GPUs that flap for the whole run, plus the
    GPUs of a share of precursor faults (hbm, pcie, nvlink) that flap until they fail."""
    bg, rng = sc.background, stream(sc.seed, "lemons")
    total = sc.nodes * sc.gpus_per_node
    count = int(rng.binomial(total, bg.lemons.gpu_share))
    picks = rng.choice(total, size=count, replace=False) if count else np.zeros(0, int)
    out = [(int(i) // sc.gpus_per_node, int(i) % sc.gpus_per_node, sc.duration_s) for i in picks]
    for e in truth:
        if e.kind == "fault" and e.cls in ("hbm", "pcie", "nvlink") and e.has_precursor and \
                rng.random() < bg.lemons.fault_share:
            out.append((index[e.node], e.gpu, e.failure_s))
    return out


class BackgroundSim:
    def __init__(self, sc: Scenario, truth: list[TruthEvent], index: dict[str, int]) -> None:
        self.sc, bg = sc, sc.background
        n, g, dur = sc.nodes, sc.gpus_per_node, sc.duration_s
        rng = self.rng = stream(sc.seed, "fleet")
        th = bg.thermal
        slot = np.linspace(0.0, th.slot_spread_c, g) if g > 1 else np.zeros(1)
        rack = rng.normal(0.0, th.rack_sd_c, (n + th.rack_nodes - 1) // th.rack_nodes)[np.arange(n) // th.rack_nodes]
        self.temp_offset = slot[None, :] + rack[:, None]
        # Correctable ECC: a few GPUs carry it, lognormal around a mean that keeps the fleet rate per GPU-day.
        ecc = bg.ecc
        self.ecc_gpus = np.flatnonzero(rng.random(n * g) < ecc.gpu_share)
        per_day = ecc.per_gpu_day / max(ecc.gpu_share, 1e-12) * np.exp(
            rng.normal(-ecc.tail_sigma ** 2 / 2, ecc.tail_sigma, len(self.ecc_gpus)))
        self.ecc_per_s = per_day / DAY_S
        self.ib_per_s = (bg.infiniband.symbol_error_per_port_day / DAY_S,
                         bg.infiniband.link_error_recovery_per_port_day / DAY_S)
        gpus_total = n * g
        ib = bg.infiniband
        parts = [
            _bursts(rng, PCIE, bg.pcie.per_1000_gpu_days, gpus_total, dur, n, g, bg.pcie.duration_s,
                    bg.pcie.count_median, 1.2),
            _bursts(rng, NVLINK, bg.nvlink.per_1000_gpu_days, gpus_total, dur, n, g, bg.nvlink.duration_s,
                    bg.nvlink.count_median, 1.2),
            _bursts(rng, IB_SYMBOL, ib.bursts_per_1000_port_days, n, dur, n, g, (30.0, 600.0),
                    ib.burst_count_median, 1.0),
        ]
        rec = bg.recovering
        for what, rate, amount in ((ECC, rec.ecc_per_1000_node_days, 60.0),
                                   (PCIE, rec.link_per_1000_node_days / 2, 400.0),
                                   (NVLINK, rec.link_per_1000_node_days / 2, 30_000.0),
                                   (IB_SYMBOL, rec.infiniband_per_1000_node_days, 800.0)):
            times = _poisson_times(rng, rate / 1000, n, dur)
            parts.append(_episodes(rng, what, times, n, g, rec.duration_s,
                                   amount * rng.lognormal(0.0, 0.6, len(times)), ramp=True))
        flaps = _poisson_times(rng, rec.infiniband_per_1000_node_days / 1000, n, dur)
        parts.append(_episodes(rng, IB_RECOVERY, flaps, n, g, (60.0, 600.0), rng.integers(1, 3, len(flaps))))
        lemons = lemon_gpus(sc, truth, index)
        for node, gpu, until in lemons:
            times = rng.uniform(0.0, until, int(rng.poisson(bg.lemons.episodes_per_day * until / DAY_S)))
            kinds = rng.choice([ECC, PCIE, NVLINK], size=len(times))
            for what, amount in ((ECC, 20.0), (PCIE, 30.0), (NVLINK, 2000.0)):
                mine = times[kinds == what]
                parts.append(_episodes(rng, what, mine, n, g, (60.0, 600.0),
                                       amount * rng.lognormal(0.0, 0.8, len(mine)),
                                       node=np.full(len(mine), node), gpu=np.full(len(mine), gpu)))
        self.lemons = [(node, gpu) for node, gpu, _ in lemons]
        # A link that retrains once and stays up (one recovery, nothing else): its own stream, so adding it left
        # every other background draw as it was.
        retrain = stream(sc.seed, "nvlink-retrain")
        self.retrain_t = np.sort(_poisson_times(retrain, rec.nvlink_retrain_per_1000_gpu_days / 1000, gpus_total, dur))
        self.retrain_gpu = retrain.integers(gpus_total, size=len(self.retrain_t))
        self.counter_episodes = Episodes.join(parts)
        states = [
            _episodes(rng, BRAKE, _poisson_times(rng, th.power_brake_per_1000_gpu_days / 1000, gpus_total, dur),
                      n, g, th.power_brake_s, 0.0),
            _episodes(rng, FAN, _poisson_times(rng, th.fan_per_1000_node_days / 1000, n, dur), n, g, th.fan_s,
                      0.0),
            _episodes(rng, REMAP, _poisson_times(rng, bg.remap.per_1000_gpu_days / 1000, gpus_total, dur), n, g,
                      bg.remap.pending_s, 0.0),
            _episodes(rng, EXCURSION, _poisson_times(rng, rec.thermal_per_1000_node_days / 1000, n, dur), n, g,
                      (600.0, 3600.0), 0.0),
        ]
        self.states = Episodes.join(states)
        self.states.amount = np.where(self.states.what == FAN, rng.uniform(*th.fan_c, len(self.states.what)),
                                      rng.uniform(8.0, 20.0, len(self.states.what)))
        self.remap_logged = np.zeros(len(self.states.what), bool)
        self.remaps = np.flatnonzero(self.states.what == REMAP)
        tel = bg.telemetry
        self.skew_s = rng.normal(0.0, tel.clock_skew_sd_s, n)
        self.unsupported = rng.random(n) < tel.unsupported_share
        self.gaps = _episodes(rng, 0, _poisson_times(rng, tel.gaps_per_1000_node_days / 1000, n, dur), n, g,
                              tel.gap_s, 0.0)
        self.profile = np.zeros(0, int)

    def job_started(self, groups: np.ndarray, count: int) -> None:
        """Draw the profile of jobs that start now on ``groups`` (``count`` groups in all)."""
        if len(self.profile) < count:
            self.profile = np.concatenate([self.profile, np.zeros(count - len(self.profile), int)])
        w = self.sc.background.workload
        shares = [1.0 - w.inference_share - w.burn_in_share - w.idle_share, w.inference_share, w.burn_in_share,
                  w.idle_share]
        self.profile[groups] = self.rng.choice(4, size=len(groups), p=np.maximum(shares, 0.0) / sum(shares))

    def load(self, t: float, group: np.ndarray, started: np.ndarray) -> np.ndarray:
        """Per-node load factor of the node's job profile, ramping up over the warm-up after the job starts."""
        warm = np.clip((t - started[group]) / max(self.sc.background.workload.warmup_s, 1e-9), 0.05, 1.0)
        factor = PROFILE_LOAD[self.profile[group]]
        inference = self.profile[group] == INFERENCE  # serving load follows requests
        return np.where(inference, factor + 0.2 * np.sin(2 * np.pi * t / 900.0 + group), factor) * warm

    def environment(self, t: float, temp: np.ndarray, power: np.ndarray, clock: np.ndarray,
                    throttle: np.ndarray, busy: np.ndarray) -> None:
        """Slot, rack and daily temperature offsets; fan events; power-brake slowdowns; thermal excursions."""
        day = self.sc.background.thermal.daily_swing_c * np.cos(2 * np.pi * (t / DAY_S - 15 / 24))
        temp += self.temp_offset + day
        s = self.states
        active = np.flatnonzero((s.start <= t) & (s.end > t))
        for i in active:
            node, gpu, what = s.node[i], s.gpu[i], s.what[i]
            if what == FAN:
                temp[node] += s.amount[i]
            elif what == BRAKE and busy[node]:
                throttle[node, gpu] |= HW_POWER_BRAKE
                clock[node, gpu] *= 0.7
                power[node, gpu] *= 0.7
            elif what == EXCURSION:
                span = s.end[i] - s.start[i]
                x = (t - s.start[i]) / span
                shape = x / 0.7 if x < 0.7 else (1.0 - x) / 0.3  # climbs, then cools back
                rise = s.amount[i] * shape
                temp[node, gpu] = min(temp[node, gpu] + rise, max(EXCURSION_MAX_C, temp[node, gpu]))

    def counters(self, t: float, dt: float, targets: list[np.ndarray], remap_pending: np.ndarray,
                 logs: list[tuple[int, int, int, str]]) -> None:
        """Add this step's background counts to the counter arrays ``targets`` (ECC, PCIe, NVLink per GPU; IB
        symbol errors and link recoveries per node) and set background remaps pending."""
        rng = self.rng
        if len(self.ecc_gpus):
            hits = rng.poisson(self.ecc_per_s * dt)
            where = np.flatnonzero(hits)
            if len(where):
                ecc = targets[ECC].reshape(-1)
                np.add.at(ecc, self.ecc_gpus[where], hits[where])
        n = self.sc.nodes
        for field, rate in ((IB_SYMBOL, self.ib_per_s[0]), (IB_RECOVERY, self.ib_per_s[1])):
            k = int(rng.poisson(rate * dt * n))
            if k:
                np.add.at(targets[field], rng.integers(n, size=k), 1)
        e = self.counter_episodes
        active = np.flatnonzero((e.start <= t) & (e.end > t))
        if len(active):
            span = np.maximum(e.end[active] - e.start[active], dt)
            progress = (t - e.start[active]) / span
            mean = e.amount[active] * dt / span * np.where(e.ramp[active], 2.0 * progress, 1.0)
            counts = rng.poisson(mean)
            for i, c in zip(active, counts, strict=True):
                if c:
                    target = targets[e.what[i]]
                    if target.ndim == 2:
                        target[e.node[i], e.gpu[i]] += c
                    else:
                        target[e.node[i]] += c
        if len(targets) > NVLINK_RETRAIN and len(self.retrain_t):
            now = self.retrain_gpu[(self.retrain_t > t - dt) & (self.retrain_t <= t)]
            if len(now):
                np.add.at(targets[NVLINK_RETRAIN].reshape(-1), now, 1)
        s = self.states
        remaps = self.remaps
        for i in remaps[(s.start[remaps] <= t) & (s.end[remaps] > t)]:
            remap_pending[s.node[i], s.gpu[i]] = True
            if not self.remap_logged[i]:
                self.remap_logged[i] = True
                targets[ECC][s.node[i], s.gpu[i]] += 1
                logs.append((int(s.node[i]), int(s.gpu[i]), 63, "row remap"))
        # the GPU was reset: the remap is applied, nothing pending any more
        for i in remaps[(s.end[remaps] <= t) & (s.end[remaps] > t - dt)]:
            remap_pending[s.node[i], s.gpu[i]] = False

    def delivery(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per node this step: (missing, duplicated, late) masks of the agents' samples."""
        tel, n, rng = self.sc.background.telemetry, self.sc.nodes, self.rng
        g = self.gaps
        missing = rng.random(n) < tel.missing_share
        in_gap = g.node[(g.start <= t) & (g.end > t)]
        missing[in_gap] = True
        duplicate = ~missing & (rng.random(n) < tel.duplicate_share)
        late = ~missing & (rng.random(n) < tel.late_share)
        return missing, duplicate, late


def precursor_shape(bg: Background, event_id: str) -> tuple[float, str, float]:
    """(strength, shape, step point) of one fault's precursor, drawn from its id so it never depends on order:
    strength is lognormal around 1; shape is a ramp, a step at ``step point`` of the precursor, or bursts."""
    rng = np.random.default_rng(zlib.crc32(f"precursor:{event_id}".encode()))
    p = bg.precursors
    strength = float(rng.lognormal(0.0, p.strength_sigma))
    draw = rng.random()
    shape = "step" if draw < p.step_share else "bursts" if draw < p.step_share + p.bursts_share else "ramp"
    return strength, shape, float(rng.uniform(0.2, 0.7))


def intensity(shape: str, progress: float, step_at: float, t: float) -> float:
    """How strongly the precursor shows at ``progress`` (0 at its start, 1 at the failure), by shape."""
    if shape == "step":
        return 0.15 if progress < step_at else 1.0
    if shape == "bursts":  # on for about a third of the time, in bursts of a few minutes
        return progress * 2.5 if np.sin(2 * np.pi * (t / 420.0 + step_at)) > 0.5 else 0.05
    return progress
