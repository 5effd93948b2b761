"""The detector's configuration: window, rules, stragglers, the hazard model and host anomalies (``[detector]``)."""

from __future__ import annotations

import math

import msgspec

from sentinel.config.fields import Section, non_negative, positive, require


class ThermalRuleConfig(Section, frozen=True):
    temp_c: float = 93.0  # Azure healthagent warns above 93 C (domain.md)
    sustain_samples: int = 3

    def __post_init__(self) -> None:
        require(0 < self.temp_c < 150, "temp_c", "must be in (0, 150)", self.temp_c)
        require(self.sustain_samples >= 1, "sustain_samples", "must be >= 1", self.sustain_samples)


class HazardConfig(Section, frozen=True):
    """The hazard model: the packaged one by default (``models.shipped``), or one a site trained
    (``sentinel train``)."""

    model: str = "shipped"  # "shipped", a model directory, a name under models_dir, or "latest"; "" = rules only
    models_dir: str = "sentinel-models"
    score_interval_s: float = 60.0  # per node, in sample time
    consecutive: int = 3  # scorings at or above the threshold before a checkpoint-and-drain finding (hysteresis)
    # ... before an alert-only finding (one physical sign): bursts of link errors on healthy GPUs are short
    alert_consecutive: int = 15
    threshold: float = 0.0  # 0: the threshold chosen at training for the target precision
    anomalies: bool = True  # IsolationForest findings (alerts only)
    anomaly_consecutive: int = 5  # scorings in a row above the anomaly threshold: only persistent outliers

    def __post_init__(self) -> None:
        positive("score_interval_s", self.score_interval_s)
        require(1 <= self.consecutive <= 100, "consecutive", "must be in [1, 100]", self.consecutive)
        require(1 <= self.alert_consecutive <= 1000, "alert_consecutive", "must be in [1, 1000]",
                self.alert_consecutive)
        require(1 <= self.anomaly_consecutive <= 100, "anomaly_consecutive", "must be in [1, 100]",
                self.anomaly_consecutive)
        require(0 <= self.threshold < 1, "threshold", "must be in [0, 1)", self.threshold)


class StragglerConfig(Section, frozen=True):
    """A busy GPU whose SM clock stays below ``clock_ratio`` of its node peers' median is a straggler."""

    clock_ratio: float = 0.8
    sustain_samples: int = 2
    # The node's median utilisation must reach this: a slow GPU makes its peers wait at every collective, so a
    # job held back by one runs its peers at 20-60 %; idle and checkpointing nodes stay below 10 %.
    min_util_pct: float = 15.0
    persist_s: float = 300.0  # report the episode again once it has lasted this long (alerts grade on it)

    def __post_init__(self) -> None:
        require(0 < self.clock_ratio < 1, "clock_ratio", "must be in (0, 1)", self.clock_ratio)
        require(self.sustain_samples >= 1, "sustain_samples", "must be >= 1", self.sustain_samples)
        require(0 <= self.min_util_pct <= 100, "min_util_pct", "must be in [0, 100]", self.min_util_pct)
        non_negative("persist_s", self.persist_s)


class HostAnomalyConfig(Section, frozen=True):
    """Each node's host metrics against its own history (sentinel/detector/host_anomaly.py); alerts only."""

    enabled: bool = True
    state_dir: str = "sentinel-host-anomaly"  # fitted models and history per node; "" = kept in memory only
    interval_s: float = 60.0  # host samples are averaged into one row per interval (SMD's sampling)
    warmup_s: float = 86_400.0  # history before a node's first fit (sample time): one daily cycle
    refit_s: float = 86_400.0  # refit each node on its history this often (sample time)
    history_s: float = 172_800.0  # history kept per node (the rows a refit learns from)
    budget_per_day: float = 1.0  # calibration alerts per node-day the threshold allows
    refractory_s: float = 1800.0  # at most one finding per node in this long
    evidence_top: int = 3  # metrics named in each finding

    def __post_init__(self) -> None:
        for name in ("interval_s", "warmup_s", "refit_s", "history_s", "budget_per_day"):
            positive(name, getattr(self, name))
        require(self.warmup_s >= 60 * self.interval_s, "warmup_s", "must be >= 60 x interval_s", self.warmup_s)
        require(self.history_s >= self.warmup_s, "history_s", "must be >= warmup_s", self.history_s)
        require(math.isfinite(self.refractory_s) and self.refractory_s >= 0, "refractory_s",
                "must be a finite number >= 0", self.refractory_s)
        require(1 <= self.evidence_top <= 7, "evidence_top", "must be in [1, 7]", self.evidence_top)


class LimitsConfig(Section, frozen=True):
    """Caps on one telemetry sample (``sentinel.detector.shapes``); the schema's ceilings are 64 GPUs, 64 NVLinks
    per GPU and 256 NICs."""

    max_gpus: int = 16  # per node: HGX/DGX carry 8, the largest servers 16
    max_nvlinks: int = 18  # per GPU: NVML_NVLINK_MAX_LINKS
    max_nics: int = 64  # per node: Ethernet interfaces and InfiniBand ports the agent reads

    def __post_init__(self) -> None:
        require(1 <= self.max_gpus <= 64, "max_gpus", "must be in [1, 64]", self.max_gpus)
        require(1 <= self.max_nvlinks <= 64, "max_nvlinks", "must be in [1, 64]", self.max_nvlinks)
        require(1 <= self.max_nics <= 256, "max_nics", "must be in [1, 256]", self.max_nics)


class DetectorConfig(Section, frozen=True):
    window_samples: int = 60
    replay_messages: int = 5000  # per partition handed over from another member (Kafka only)
    record_interval_s: float = 30.0  # how often each node's last-seen and GPU rows are written to the store
    thermal: ThermalRuleConfig = msgspec.field(default_factory=ThermalRuleConfig)
    straggler: StragglerConfig = msgspec.field(default_factory=StragglerConfig)
    hazard: HazardConfig = msgspec.field(default_factory=HazardConfig)
    host_anomaly: HostAnomalyConfig = msgspec.field(default_factory=HostAnomalyConfig)
    limits: LimitsConfig = msgspec.field(default_factory=LimitsConfig)

    def __post_init__(self) -> None:
        require(2 <= self.window_samples <= 100_000, "window_samples", "must be in [2, 100000]", self.window_samples)
        require(self.replay_messages >= 0, "replay_messages", "must be >= 0", self.replay_messages)
        require(math.isfinite(self.record_interval_s) and self.record_interval_s >= 0, "record_interval_s",
                 "must be a finite number >= 0", self.record_interval_s)
