"""Scenario files: what a simulated fleet looks like and which faults it suffers, as one validated TOML file.

Rates are per 1,000 node-days (the unit false-alarm budgets use). Each fault class has a precursor duration
range (how long before the failure its signal starts) and an honest share of faults with no precursor at all.
Errors name the dotted path (``faults.hbm.no_precursor_share: must be in [0, 1], got 1.5``); unknown keys are
rejected. Shipped scenarios live in ``sentinel/sim/scenarios/`` and are loaded by name.
"""

from __future__ import annotations

import math
import tomllib
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from sentinel.capacity.goodput.params import Goodput
from sentinel.config import explain
from sentinel.config.fields import Section, non_negative, require
from sentinel.errors import ConfigError
from sentinel.sim.background_spec import Background


class FaultClass(StrEnum):
    """Failures that interrupt a job (the detector must find them; those with a precursor, before they land)."""

    HBM = "hbm"  # correctable ECC + pending row remaps rising -> Xid 63/64 -> Xid 48 or 94/95
    THERMAL = "thermal"  # cooling degrades -> temperature climbs, HW slowdown -> shutdown / Xid 79
    NVLINK = "nvlink"  # CRC / replay errors rising -> Xid 74
    PCIE = "pcie"  # replay counter rising (or nothing) -> Xid 79
    GSP = "gsp"  # Xid 119/120, no precursor
    INFINIBAND = "infiniband"  # symbol errors -> link error recovery -> link downed
    FAIL_SLOW = "fail_slow"  # one GPU's clocks drop: the whole job slows (a straggler)
    SILENT = "silent"  # hardware failure with no precursor (GPU off the bus, host parts)
    SOFTWARE = "software"  # NCCL timeouts, software bugs: the job dies, the hardware is fine


# Classes that by their nature give no warning: their precursor settings are ignored.
NO_PRECURSOR = frozenset({FaultClass.GSP, FaultClass.FAIL_SLOW, FaultClass.SILENT, FaultClass.SOFTWARE})


class BenignClass(StrEnum):
    """Events that must never cause an action."""

    APP_XID = "app_xid"  # Xid 13/31/43 from application bugs
    SPIKE = "spike"  # a transient temperature or power spike
    REBOOT = "reboot"  # a planned reboot: counters reset, boot id changes
    DRIVER_RELOAD = "driver_reload"  # the NVIDIA driver is reloaded: GPU counters reset, same boot id


class FaultSpec(Section, frozen=True):
    rate_per_1000_node_days: float = 0.0
    precursor_s: tuple[float, float] = (1800.0, 7200.0)  # precursor start, uniform in this range before failure
    no_precursor_share: float = 0.2

    def __post_init__(self) -> None:
        non_negative("rate_per_1000_node_days", self.rate_per_1000_node_days)
        low, high = self.precursor_s
        require(math.isfinite(high) and 0 <= low <= high, "precursor_s", "must be [low, high] with 0 <= low <= high",
                 list(self.precursor_s))
        require(0 <= self.no_precursor_share <= 1, "no_precursor_share", "must be in [0, 1]", self.no_precursor_share)


class BenignSpec(Section, frozen=True):
    rate_per_1000_node_days: float = 0.0

    def __post_init__(self) -> None:
        non_negative("rate_per_1000_node_days", self.rate_per_1000_node_days)


class Faults(Section, frozen=True):
    hbm: FaultSpec = msgspec.field(default_factory=FaultSpec)
    thermal: FaultSpec = msgspec.field(default_factory=FaultSpec)
    nvlink: FaultSpec = msgspec.field(default_factory=FaultSpec)
    pcie: FaultSpec = msgspec.field(default_factory=FaultSpec)
    gsp: FaultSpec = msgspec.field(default_factory=FaultSpec)
    infiniband: FaultSpec = msgspec.field(default_factory=FaultSpec)
    fail_slow: FaultSpec = msgspec.field(default_factory=FaultSpec)
    silent: FaultSpec = msgspec.field(default_factory=FaultSpec)
    software: FaultSpec = msgspec.field(default_factory=FaultSpec)

    def spec(self, cls: FaultClass) -> FaultSpec:
        return getattr(self, cls.value)  # type: ignore[no-any-return]


class Benign(Section, frozen=True):
    app_xid: BenignSpec = msgspec.field(default_factory=BenignSpec)
    spike: BenignSpec = msgspec.field(default_factory=BenignSpec)
    reboot: BenignSpec = msgspec.field(default_factory=BenignSpec)
    driver_reload: BenignSpec = msgspec.field(default_factory=BenignSpec)

    def spec(self, cls: BenignClass) -> BenignSpec:
        return getattr(self, cls.value)  # type: ignore[no-any-return]


class Storm(Section, frozen=True):
    """A bad driver rollout: ``fraction`` of the fleet reports errors within ``spread_s`` of ``at_s``."""

    at_s: float
    fraction: float = 0.5
    spread_s: float = 60.0
    xid: int = 119

    def __post_init__(self) -> None:
        require(math.isfinite(self.at_s) and self.at_s >= 0, "at_s", "must be a finite number >= 0", self.at_s)
        require(0 < self.fraction <= 1, "fraction", "must be in (0, 1]", self.fraction)
        require(math.isfinite(self.spread_s) and self.spread_s >= 0, "spread_s", "must be >= 0", self.spread_s)
        require(0 < self.xid < 65536, "xid", "must be an Xid code", self.xid)


class Noise(Section, frozen=True):
    temp_sd_c: float = 0.6
    power_sd_w: float = 8.0

    def __post_init__(self) -> None:
        for name in ("temp_sd_c", "power_sd_w"):
            non_negative(name, getattr(self, name))


class Scenario(Section, frozen=True):
    name: str
    description: str = ""
    seed: int = 0
    nodes: int = 16
    gpus_per_node: int = 8
    duration_s: float = 86_400.0
    step_s: float = 10.0
    busy_fraction: float = 0.85  # long-run share of nodes running a job
    job_nodes: int = 4  # data-parallel peers per job: they share the step rhythm and wait for the slowest GPU
    job_mean_s: float = 28_800.0  # mean job length (exponential); idle gaps follow from busy_fraction
    daily_amplitude: float = 0.0  # 0..1: idle gaps are longer at night by this share (daily load)
    weekly_amplitude: float = 0.0  # 0..1: idle gaps are longer on days 6 and 7 of each week by this share
    checkpoint_interval_s: float = 3600.0  # every job pauses to checkpoint this often ...
    checkpoint_s: float = 60.0  # ... for this long
    noise: Noise = msgspec.field(default_factory=Noise)
    faults: Faults = msgspec.field(default_factory=Faults)
    benign: Benign = msgspec.field(default_factory=Benign)
    storm: Storm | None = None
    background: Background = msgspec.field(default_factory=Background)
    goodput: Goodput = msgspec.field(default_factory=Goodput)  # what interruptions cost jobs (bench goodput)

    def __post_init__(self) -> None:
        require(1 <= self.nodes <= 1_000_000, "nodes", "must be in [1, 1000000]", self.nodes)
        require(1 <= self.gpus_per_node <= 64, "gpus_per_node", "must be in [1, 64]", self.gpus_per_node)
        require(math.isfinite(self.duration_s) and self.duration_s > 0, "duration_s", "must be a finite number > 0",
                 self.duration_s)
        require(math.isfinite(self.step_s) and 0 < self.step_s <= self.duration_s, "step_s",
                 "must be > 0 and at most duration_s", self.step_s)
        require(0 < self.busy_fraction <= 1, "busy_fraction", "must be in (0, 1]", self.busy_fraction)
        require(1 <= self.job_nodes <= self.nodes, "job_nodes", "must be in [1, nodes]", self.job_nodes)
        require(math.isfinite(self.job_mean_s) and self.job_mean_s > 0, "job_mean_s", "must be > 0", self.job_mean_s)
        require(0 <= self.daily_amplitude <= 1, "daily_amplitude", "must be in [0, 1]", self.daily_amplitude)
        require(0 <= self.weekly_amplitude <= 1, "weekly_amplitude", "must be in [0, 1]", self.weekly_amplitude)
        require(math.isfinite(self.checkpoint_interval_s) and self.checkpoint_interval_s > self.checkpoint_s >= 0,
                "checkpoint_interval_s", "must be > checkpoint_s >= 0", self.checkpoint_interval_s)
        if self.storm is not None:
            require(self.storm.at_s < self.duration_s, "storm.at_s", "must fall inside duration_s", self.storm.at_s)

    @property
    def node_days(self) -> float:
        return self.nodes * self.duration_s / 86_400.0

    def clean(self) -> Scenario:
        """The same scenario on a clean fleet: its ``[background]`` switched off."""
        return msgspec.structs.replace(self, background=msgspec.structs.replace(self.background, enabled=False))


def from_mapping(raw: dict[str, Any]) -> Scenario:
    try:
        return msgspec.convert(raw, Scenario)
    except msgspec.ValidationError as exc:
        raise ConfigError(explain(str(exc))) from None


def shipped() -> list[str]:
    """Names of the scenarios that ship with Sentinel."""
    folder = resources.files("sentinel.sim") / "scenarios"
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))


def load(name_or_path: str) -> Scenario:
    """Load a scenario file, or a shipped scenario by name (``smoke``, ``mixed``, ``llama3-mix``, ...)."""
    path = Path(name_or_path)
    if path.suffix != ".toml" and not path.exists():
        if name_or_path not in shipped():
            raise ConfigError(f"{name_or_path}: no such scenario file or shipped scenario "
                              f"(shipped: {', '.join(shipped())})")
        text = (resources.files("sentinel.sim") / "scenarios" / f"{name_or_path}.toml").read_text(encoding="utf-8")
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{name_or_path}: not valid TOML: {exc}") from None
    return from_mapping(raw)
