"""Rules over the node's fabric and its GPUs' peers: InfiniBand link counters, and stragglers.

Each fires once per episode (the window remembers what it reported) and cites its threshold's source.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sentinel.config import StragglerConfig
from sentinel.counters import rate_per_h
from sentinel.detector.findings import make_finding
from sentinel.detector.sample_view import GpuView, SampleView
from sentinel.detector.windows import GPU_FIELDS, NodeWindow
from sentinel.events import (
    EvidenceValue,
    Finding,
    FindingClass,
    Recommendation,
    Severity,
)
from sentinel_models.features import SYMBOL_ERRORS_PER_H, THERMAL_MASK

# NVSentinel and Azure healthagent: any increase of link_downed is fatal for the port (domain.md).
# IBTA's 10^-12 bit-error-rate bound: more than 120 symbol errors per hour is a pre-failure signal (domain.md);
# a handful of errors in a short window is not a rate, so at least SYMBOL_MIN_COUNT must be seen.
SYMBOL_MIN_COUNT = 10
# NVSentinel: link_error_recovery > 5/min is degradation.
RECOVERY_PER_H = 300.0
# NVML clock-event reasons that say the power envelope, not the GPU, sets the clock: SW power cap 0x4, HW power
# brake 0x80 (asserted by the system or rack power supply, nvml.h). A GPU slowed by them is capped, not failing.
POWER_CAP_MASK = 0x4 | 0x80
_UTIL, _CLOCK = GPU_FIELDS.index("util_pct"), GPU_FIELDS.index("sm_clock_mhz")


def infiniband_rules(window: NodeWindow, sample: SampleView, now: float) -> list[Finding]:
    if window.count < 2 or (not window.ib_moved and not window.ib_rate_reported):
        return []  # no InfiniBand counter rose and no episode is open: the common case (noted by the push)
    before, last = window.recent(window.node, 2)
    if np.isnan(last[1:]).all():
        return []
    out: list[Finding] = []
    if last[3] > before[3]:  # link_downed; a reset (reboot) goes backwards, never up
        out.append(make_finding(
            "ib-link-downed", FindingClass.NIC_INFINIBAND, sample.node, now, sample.ts, Severity.FATAL,
            Recommendation.DRAIN, 1.0, f"InfiniBand link went down ({int(last[3] - before[3])} time(s))", None,
            {"link_downed": int(last[3]), "delta": int(last[3] - before[3])}))
    moved = last[1] > before[1] or last[2] > before[2]
    if not moved and not window.ib_rate_reported:
        return out  # the rates over the window can only have fallen: nothing new to judge (the common case)
    node = window.recent(window.node, window.size)
    ts, symbol, recovery = node[:, 0], node[:, 1], node[:, 2]
    symbol_rate = float(rate_per_h(symbol, ts))
    recovery_rate = float(rate_per_h(recovery, ts))
    seen = float(np.nan_to_num(np.clip(np.diff(symbol), 0, None)).sum())
    errors = symbol_rate > SYMBOL_ERRORS_PER_H and seen >= SYMBOL_MIN_COUNT
    # One signal alerts (a marginal cable errs for a while and recovers, every day somewhere in a fleet); symbol
    # errors with link recoveries, or recoveries beyond NVSentinel's 5/min, mean the link is going: checkpoint.
    level = 2 if (errors and recovery_rate > 0) or recovery_rate > RECOVERY_PER_H else 1 if errors else 0
    if level > window.ib_rate_reported:
        window.ib_rate_reported = level
        evidence: dict[str, EvidenceValue] = {"symbol_error_per_h": round(symbol_rate, 1),
                                              "link_error_recovery_per_h": round(recovery_rate, 1),
                                              "window_s": round(float(ts[-1] - ts[0]), 1)}
        summary = (f"InfiniBand link degrading: {symbol_rate:.0f} symbol errors/h (limit {SYMBOL_ERRORS_PER_H:.0f}), "
                   f"{recovery_rate:.0f} link recoveries/h")
        severity, recommendation, confidence = ((Severity.CRITICAL, Recommendation.CHECKPOINT_DRAIN, 0.95)
                                                if level == 2 else (Severity.WARNING, Recommendation.ALERT, 0.5))
        out.append(make_finding("ib-link-degraded", FindingClass.NIC_INFINIBAND, sample.node, now, sample.ts,
                                severity, recommendation, confidence,
                                summary if level == 2 else summary + ": alert (no link recovery yet)", None,
                                evidence))
    elif level == 0 and symbol_rate < SYMBOL_ERRORS_PER_H / 2 and recovery_rate == 0:
        window.ib_rate_reported = 0
    return out


def straggler_rule(window: NodeWindow, sample: SampleView, config: StragglerConfig,
                   now: float, readings: Sequence[Sequence[float]] | None = None) -> list[Finding]:
    """A busy GPU whose SM clock lags its node peers' median for ``sustain_samples`` samples in a row, with no
    power-cap clock-event reason set (a power brake or cap is the rack's or the job's envelope, not the GPU).
    Reported when it starts (an alert) and once more when it has lasted ``persist_s`` (evidence ``duration_s``):
    then it is confirmed, and the finding asks for a checkpoint and a drain; the policy weighs the job's slow steps
    against a restart before it acts (``policy.straggler``).

    Data-parallel peers run the same kernels in lock-step, so one slow GPU stretches every step of the job
    (fail-slow; Minder, NSDI'25, and the Llama 3 report's stragglers; FALCON, 2024: 1.34x job slowdown on average,
    episodes of tens of seconds to ~10 h). ``readings``: what ``window.push`` returned
    for this sample; when every GPU gave a clock and a utilisation, the common case is answered from it.
    """
    if readings is not None and not window.slow_streak and not window.slow_reported:
        utils, clocks = readings[_UTIL], readings[_CLOCK]
        # no NaN (every GPU gave both), and the node idles or nobody lags with no episode open: the common cases
        if ((total := sum(utils) + sum(clocks)) == total and len(clocks) >= 2
                and (_median(utils) < config.min_util_pct or min(clocks) >= config.clock_ratio * _median(clocks))):
            return []
    busy = [g for g in sample.gpus if g.util_gpu_pct is not None and g.sm_clock_mhz is not None]
    if len(busy) < 2 or _median([g.util_gpu_pct or 0.0 for g in busy]) < config.min_util_pct:
        window.slow_streak.clear()
        return []
    clocks = [g.sm_clock_mhz or 0.0 for g in busy]
    if not window.slow_streak and not window.slow_reported and min(clocks) >= config.clock_ratio * _median(clocks):
        return []  # nobody lags and no episode is open: the common case
    series = window.series(1)
    clock, util, power = series["sm_clock_mhz"][-1], series["util_pct"][-1], series["power_w"][-1]
    peer_clock = peer_clock_now(busy)
    peer_util = _median([g.util_gpu_pct or 0.0 for g in busy])
    out: list[Finding] = []
    if not (peer_clock > 0 and peer_util >= config.min_util_pct) or len(clock) < 2:
        window.slow_streak.clear()
        return out
    ratio = clock / peer_clock
    capped = series["throttle"][-1] & POWER_CAP_MASK
    for gpu in range(len(clock)):
        if capped[gpu] or not ratio[gpu] < config.clock_ratio:
            window.slow_streak.pop(gpu, None)
            if capped[gpu] or ratio[gpu] >= (1 + config.clock_ratio) / 2:  # hysteresis before an episode ends
                window.slow_reported.discard(gpu)
                window.slow_persisted.discard(gpu)
            continue
        streak = window.slow_streak[gpu] = window.slow_streak.get(gpu, 0) + 1
        if streak == 1 and gpu not in window.slow_reported:
            window.slow_since[gpu] = sample.ts  # a new episode starts
        since = window.slow_since.setdefault(gpu, sample.ts)
        lasted = sample.ts - since
        if streak < config.sustain_samples:
            continue
        confirmed = False
        if gpu in window.slow_reported:
            if not (config.persist_s and gpu not in window.slow_persisted and lasted >= config.persist_s):
                continue
            window.slow_persisted.add(gpu)  # once more: it persists, so it is confirmed (docs/detection.md)
            confirmed = True
        window.slow_reported.add(gpu)
        thermal = bool(series["throttle"][-1, gpu] & THERMAL_MASK)
        text = (f"GPU {gpu} runs at {ratio[gpu]:.0%} of its peers' SM clock ({clock[gpu]:.0f} vs {peer_clock:.0f} "
                f"MHz) for {lasted:.0f} s ({streak} samples): it holds the job back")
        # A confirmed straggler is removed the way a predicted failure is (checkpoint, drain, requeue), when the
        # policy finds its slow steps cost the job more than a restart would (policy.straggler).
        out.append(make_finding(
            "straggler-confirmed" if confirmed else "straggler-clock", FindingClass.STRAGGLER, sample.node, now,
            sample.ts, Severity.CRITICAL if confirmed else Severity.WARNING,
            Recommendation.CHECKPOINT_DRAIN if confirmed else Recommendation.ALERT,
            min(1.0, 0.6 + (config.clock_ratio - float(ratio[gpu]))),
            text + ("; confirmed: remove it from the job" if confirmed else ""), gpu,
            {"sm_clock_mhz": float(clock[gpu]), "peer_median_mhz": peer_clock, "ratio": round(float(ratio[gpu]), 3),
             "util_pct": float(np.nan_to_num(util[gpu])), "power_w": float(np.nan_to_num(power[gpu])),
             "thermal_throttle": thermal, "duration_s": round(lasted, 1)}))
    return out


def peer_clock_now(busy: list[GpuView]) -> float:
    return float(_median([g.sm_clock_mhz or 0.0 for g in busy]))


def _median(values: Sequence[float]) -> float:
    """``statistics.median`` of a short list, without its generality (this runs on every sample)."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
