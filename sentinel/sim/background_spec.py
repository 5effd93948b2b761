"""The ``[background]`` section of a scenario: what a healthy fleet does every day without failing.

On real fleets correctable ECC errors, row remaps, PCIe replays, NVLink CRC bursts and InfiniBand symbol errors
tick on healthy hardware; GPUs run at different temperatures by slot and rack; jobs differ; telemetry has gaps.
Each component is a sub-section with rates; every default is sourced in docs/simulator.md (published fleet
figures from shared/notes/domain.md where they exist, otherwise marked there as an assumption). The section is
on by default; ``enabled = false`` restores the clean fleet bit for bit (its draws come from their own random
stream, so switching it never reshuffles the rest of the scenario).
"""

from __future__ import annotations

import math

import msgspec

from sentinel.config import require


def _rate(name: str, value: float) -> None:
    require(math.isfinite(value) and value >= 0, name, "must be a finite number >= 0", value)


def _share(name: str, value: float) -> None:
    require(0 <= value <= 1, name, "must be in [0, 1]", value)


def _range(name: str, value: tuple[float, float]) -> None:
    low, high = value
    require(math.isfinite(high) and 0 <= low <= high, name, "must be [low, high] with 0 <= low <= high", list(value))


class _Part(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if name.endswith("_share"):
                _share(name, value)
            elif isinstance(value, tuple):
                _range(name, value)
            elif isinstance(value, float | int) and not isinstance(value, bool):
                _rate(name, float(value))


class Ecc(_Part, frozen=True):
    """Correctable (single-bit) ECC: few GPUs log any, and a handful of those carry most of it."""

    gpu_share: float = 0.05  # GPUs that log any SBE (Delta 5.1 %, Perlmutter 4.5 %)
    per_gpu_day: float = 1.0  # fleet mean SBE per GPU-day (Delta 0.53, Perlmutter 2.83)
    tail_sigma: float = 1.5  # lognormal spread of the per-GPU rate among those GPUs (heavy tail)


class Remap(_Part, frozen=True):
    """Row remaps on healthy GPUs: Xid 63 (remap succeeded), remap pending until the next GPU reset."""

    per_1000_gpu_days: float = 0.2  # Delta H100 Xid 63: 0.18
    pending_s: tuple[float, float] = (3600.0, 86_400.0)  # until a reset applies it (assumption)


class Bursts(_Part, frozen=True):
    """Rare bursts of link errors on healthy links (no failure follows)."""

    per_1000_gpu_days: float = 20.0  # assumption: no public background rate
    count_median: float = 40.0  # errors in a burst, lognormal (sigma 1.2) around this
    duration_s: tuple[float, float] = (30.0, 300.0)


class Infiniband(_Part, frozen=True):
    symbol_error_per_port_day: float = 10.0  # assumption (IBTA BER 1e-12 allows far more)
    link_error_recovery_per_port_day: float = 0.05  # assumption
    bursts_per_1000_port_days: float = 20.0  # short symbol-error bursts (a marginal cable, a flap)
    burst_count_median: float = 60.0


class Thermal(_Part, frozen=True):
    slot_spread_c: float = 4.0  # rear slots run this much warmer than front ones (assumption: no public spread)
    rack_sd_c: float = 1.5  # per-rack inlet offset (assumption)
    rack_nodes: int = 16
    daily_swing_c: float = 2.0  # ambient swing over the day, warmest mid-afternoon (Llama 3: 1-2 % throughput)
    power_brake_per_1000_gpu_days: float = 20.0  # benign power-brake slowdowns (assumption)
    power_brake_s: tuple[float, float] = (20.0, 120.0)
    fan_per_1000_node_days: float = 10.0  # a fan slows: the node's GPUs run warmer for a while (assumption)
    fan_c: tuple[float, float] = (3.0, 8.0)
    fan_s: tuple[float, float] = (600.0, 3600.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.rack_nodes >= 1, "rack_nodes", "must be >= 1", self.rack_nodes)


class Workload(_Part, frozen=True):
    """Shares of jobs by profile (training is the rest) and the warm-up ramp at job start."""

    inference_share: float = 0.15  # lower, fluctuating load
    burn_in_share: float = 0.05  # everything at the limit
    idle_share: float = 0.05  # allocated but idle (waiting on data, a debugger)
    warmup_s: float = 120.0


class Telemetry(_Part, frozen=True):
    missing_share: float = 0.002  # samples that never arrive (assumption: no public fleet rate)
    gaps_per_1000_node_days: float = 30.0  # agent restarts: the node is silent for a while
    gap_s: tuple[float, float] = (30.0, 300.0)
    duplicate_share: float = 0.001  # delivered twice (at-least-once transport)
    late_share: float = 0.001  # delivered one step late, after the next sample
    clock_skew_sd_s: float = 0.5  # per node
    unsupported_share: float = 0.05  # nodes whose GPUs report no NVLink and no row-remap fields (PCIe cards)


class Lemons(_Part, frozen=True):
    """GPUs that flap warnings for days; most never fail (Meta: ~1.2 % of nodes were lemons)."""

    gpu_share: float = 0.003
    episodes_per_day: float = 6.0
    fault_share: float = 0.2  # share of precursor faults (hbm, pcie, nvlink) that land on a lemon


class Recovering(_Part, frozen=True):
    """Fault-like episodes that end on their own: a precursor signal with no failure after it."""

    thermal_per_1000_node_days: float = 10.0  # a thermal excursion of 8-20 C that cools down again (max 91 C)
    link_per_1000_node_days: float = 10.0  # NVLink / PCIe error ramp that stops
    infiniband_per_1000_node_days: float = 10.0  # a link flap: symbol errors and a recovery, then clean
    ecc_per_1000_node_days: float = 10.0  # correctable ECC climbing, then quiet
    nvlink_retrain_per_1000_gpu_days: float = 2.0  # an NVLink retrains once and stays up (assumption: no public rate)
    duration_s: tuple[float, float] = (300.0, 7200.0)


class Precursors(_Part, frozen=True):
    """How real precursors vary: strength (lognormal) and shape (ramp, step, bursts)."""

    strength_sigma: float = 0.6
    step_share: float = 0.25
    bursts_share: float = 0.25

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.step_share + self.bursts_share <= 1, "bursts_share", "must be <= 1 - step_share",
                self.bursts_share)


class Background(_Part, frozen=True):
    enabled: bool = True
    ecc: Ecc = msgspec.field(default_factory=Ecc)
    remap: Remap = msgspec.field(default_factory=Remap)
    pcie: Bursts = msgspec.field(default_factory=Bursts)
    nvlink: Bursts = msgspec.field(default_factory=lambda: Bursts(count_median=3000.0))
    infiniband: Infiniband = msgspec.field(default_factory=Infiniband)
    thermal: Thermal = msgspec.field(default_factory=Thermal)
    workload: Workload = msgspec.field(default_factory=Workload)
    telemetry: Telemetry = msgspec.field(default_factory=Telemetry)
    lemons: Lemons = msgspec.field(default_factory=Lemons)
    recovering: Recovering = msgspec.field(default_factory=Recovering)
    precursors: Precursors = msgspec.field(default_factory=Precursors)

    def scaled(self, factor: float) -> Background:
        """The same background with every rate (``per_`` fields) times ``factor``: a quieter or noisier fleet."""
        parts = {}
        for name in self.__struct_fields__:
            part = getattr(self, name)
            if isinstance(part, _Part):
                rates = {f: getattr(part, f) * factor for f in part.__struct_fields__ if "per_" in f}
                parts[name] = msgspec.structs.replace(part, **rates)
        return msgspec.structs.replace(self, **parts)

    def __post_init__(self) -> None:
        w = self.workload
        require(w.inference_share + w.burn_in_share + w.idle_share <= 1, "workload.idle_share",
                "the profile shares must add up to at most 1", w.idle_share)
