"""Detection rules: functions of (window, sample or log event, config) that return findings.

Each rule cites where its threshold comes from. A rule fires once per episode (the window remembers open
episodes), so a GPU that stays lost or hot does not flood the policy; finding ids are derived from the evidence,
so a replayed message yields the same id and the store ignores it.
"""

from __future__ import annotations

import functools
import operator
import re
import sys
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from sentinel.config import DetectorConfig
from sentinel.detector.counter_rules import counter_warnings
from sentinel.detector.fabric_rules import infiniband_rules, straggler_rule
from sentinel.detector.findings import make_finding
from sentinel.detector.sample_view import GpuView, SampleView
from sentinel.detector.windows import GPU_FIELDS, NodeWindow, counter_delta
from sentinel.detector.xid import classify
from sentinel.events import (
    EvidenceValue,
    Finding,
    FindingClass,
    GpuState,
    LogEvent,
    LogKind,
    Recommendation,
    Severity,
)

# NVML clock-event reasons (nvml.h): HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80.
THERMAL_THROTTLE_MASK = 0x20 | 0x40
_TEMP = GPU_FIELDS.index("temp_c")
_REMEMBERED = operator.attrgetter("index", "ecc_dbe_volatile", "row_remap_failure", "pci_bus_id")


def xid_rule(event: LogEvent, now: float, gpu_index: int | None) -> Finding | None:
    """An Xid from the kernel log, judged by the NVIDIA catalog (sentinel.detector.xid)."""
    if event.kind is not LogKind.XID or event.xid is None:
        return None
    info = classify(event.xid, event.message)
    evidence: dict[str, EvidenceValue] = {"xid": event.xid, "meaning": info.meaning, "line": event.message[:300]}
    if event.pci_bus_id:
        evidence["pci_bus_id"] = event.pci_bus_id
    where = f"GPU {gpu_index}" if gpu_index is not None else (event.pci_bus_id or "unknown GPU")
    return make_finding(
        "xid-catalog",
        FindingClass.GPU_XID,
        event.node,
        now,
        event.ts,
        info.severity,
        info.recommendation,
        1.0,
        f"Xid {event.xid} on {where}: {info.meaning}",
        gpu_index,
        evidence,
    )


def sample_rules(
    window: NodeWindow, sample: SampleView, config: DetectorConfig, now: float,
    previous: Mapping[int, GpuView | LastReading] | None = None, readings: Sequence[Sequence[float]] | None = None,
) -> list[Finding]:
    """Rules over one new sample (already pushed into ``window``). ``previous`` holds each GPU's last reading;
    None: what ``remember`` kept in the window, read only when a GPU reports double-bit ECC or a remap failure.
    ``readings``: what ``window.push`` returned for this sample (the common cases are answered from it)."""
    out: list[Finding] = []
    lost = window.lost
    for gpu in sample.gpus:
        if gpu.state is GpuState.LOST or (lost and gpu.index in lost):
            out.extend(_gpu_lost(window, sample, gpu, now))
        if gpu.row_remap_failure or gpu.ecc_dbe_volatile:  # rare: only then is the previous reading needed
            prev = previous.get(gpu.index) if previous is not None else _remembered(window, gpu.index)
            if gpu.row_remap_failure or prev is None or prev.ecc_dbe_volatile != gpu.ecc_dbe_volatile:
                out.extend(_ecc_dbe(window, sample, gpu, now, prev))
    out.extend(_thermal(window, sample, config, now, readings[_TEMP] if readings is not None else None))
    out.extend(counter_warnings(window, sample, now))
    out.extend(infiniband_rules(window, sample, now))
    out.extend(straggler_rule(window, sample, config.straggler, now, readings))
    return out


def _gpu_lost(window: NodeWindow, sample: SampleView, gpu: GpuView, now: float) -> list[Finding]:
    # NVML_ERROR_GPU_IS_LOST is what the driver reports after Xid 79 (fallen off the bus): reboot node.
    if gpu.state is not GpuState.LOST:
        window.lost.discard(gpu.index)
        return []
    if gpu.index in window.lost:
        return []
    window.lost.add(gpu.index)
    return [
        make_finding(
            "gpu-lost",
            FindingClass.GPU_LOST,
            sample.node,
            now,
            sample.ts,
            Severity.FATAL,
            Recommendation.DRAIN,
            1.0,
            f"GPU {gpu.index} no longer answers (fallen off the bus)",
            gpu.index,
            {"gpu_state": gpu.state.value, "pci_bus_id": gpu.pci_bus_id, "uuid": gpu.uuid},
        )
    ]


def _ecc_dbe(
    window: NodeWindow, sample: SampleView, gpu: GpuView, now: float, prev: GpuView | LastReading | None
) -> list[Finding]:
    # Azure healthagent: volatile double-bit ECC > 0 is an error; any increase means uncorrectable memory errors.
    out: list[Finding] = []
    delta = counter_delta(prev.ecc_dbe_volatile if prev else None, gpu.ecc_dbe_volatile)
    if delta is not None and delta > 0:
        summary = f"GPU {gpu.index}: {delta} new double-bit ECC error(s)"
        evidence: dict[str, EvidenceValue] = {"ecc_dbe_volatile": gpu.ecc_dbe_volatile or 0, "delta": delta}
        out.append(_fatal_ecc("ecc-dbe", sample, gpu.index, now, summary, evidence))
    if gpu.row_remap_failure and not (prev and prev.row_remap_failure):
        # Azure healthagent: row-remap failure != 0 is an error (the HBM has run out of spare rows).
        summary = f"GPU {gpu.index}: row remapping failed"
        out.append(_fatal_ecc("row-remap-failure", sample, gpu.index, now, summary, {"row_remap_failure": True}))
    return out


def _fatal_ecc(rule: str, sample: SampleView, gpu: int, now: float, summary: str,
               evidence: dict[str, EvidenceValue]) -> Finding:
    return make_finding(rule, FindingClass.GPU_ECC, sample.node, now, sample.ts, Severity.FATAL, Recommendation.DRAIN,
                    1.0, summary, gpu, evidence)


def _thermal(window: NodeWindow, sample: SampleView, config: DetectorConfig, now: float,
             temps_now: Sequence[float] | None = None) -> list[Finding]:
    """Sustained over-temperature: ``sustain_samples`` consecutive readings at or above ``temp_c``.

    Default 93 C from Azure healthagent's warning threshold; a GPU that sits there while climbing is in thermal
    runaway and will hit hardware slowdown and then shutdown (or fall off the bus) — drain it before that.
    """
    rule = config.thermal
    if not window.hot_reported and not window.hot_warned and (
        not any(map(rule.temp_c.__le__, temps_now)) if temps_now is not None  # NaN (no reading) is not hot
        else all(g.temp_c is None or g.temp_c < rule.temp_c for g in sample.gpus)
    ):  # fast path, nearly every sample: nothing hot now, no episode open
        return []
    out: list[Finding] = []
    now_temps = window.recent(window.temp_c, 1)[-1]
    with np.errstate(invalid="ignore"):
        for index in np.flatnonzero(now_temps < rule.temp_c - 3.0):  # 3 C hysteresis before an episode ends
            window.hot_warned.discard(int(index))
        for index in np.flatnonzero(now_temps >= rule.temp_c):
            gpu = int(index)
            if gpu in window.hot_warned:
                continue
            # One reading over the line warns at once (Azure healthagent's warning); only sustained heat drains.
            window.hot_warned.add(gpu)
            out.append(make_finding(
                "thermal-high", FindingClass.GPU_THERMAL, sample.node, now, sample.ts, Severity.WARNING,
                Recommendation.ALERT, 0.5, f"GPU {gpu} at {now_temps[gpu]:.1f} C (limit {rule.temp_c:.0f} C)", gpu,
                {"temp_c": round(float(now_temps[gpu]), 2), "limit_c": rule.temp_c}))
    temps = window.recent(window.temp_c, rule.sustain_samples)
    if temps.shape[0] < rule.sustain_samples:
        return out
    with np.errstate(invalid="ignore"):
        hot = np.all(temps >= rule.temp_c, axis=0)
        cool = np.all(temps < rule.temp_c - 3.0, axis=0)  # 3 C hysteresis before an episode ends
    for index in np.flatnonzero(cool):
        window.hot_reported.discard(int(index))
    throttle = window.recent(window.throttle, rule.sustain_samples)
    for index in np.flatnonzero(hot):
        gpu = int(index)
        if gpu in window.hot_reported:
            continue
        window.hot_reported.add(gpu)
        series = temps[:, gpu]
        slope = float(series[-1] - series[0]) / max(len(series) - 1, 1)
        throttled = bool(np.any(throttle[:, gpu] & THERMAL_THROTTLE_MASK))
        confidence = min(1.0, 0.7 + 0.1 * (slope > 0) + 0.2 * throttled)
        out.append(
            make_finding(
                "thermal-sustained",
                FindingClass.GPU_THERMAL,
                sample.node,
                now,
                sample.ts,
                Severity.CRITICAL,
                Recommendation.CHECKPOINT_DRAIN,
                confidence,
                f"GPU {gpu} at {series[-1]:.1f} C for {rule.sustain_samples} samples "
                f"(limit {rule.temp_c:.0f} C, {slope:+.2f} C/sample)",
                gpu,
                {
                    "temp_c": round(float(series[-1]), 2),
                    "limit_c": rule.temp_c,
                    "slope_c_per_sample": round(slope, 3),
                    "thermal_throttle": throttled,
                },
            )
        )
    return out


_PCI = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})")


class LastReading(NamedTuple):
    """What the rules need of a GPU's previous reading."""

    ecc_dbe_volatile: int | None
    row_remap_failure: bool | None
    pci: str | None  # pci_key of its bus id (interned: the same few ids on every node)


def remember(window: NodeWindow, sample: SampleView) -> None:
    """Keep what the rules need of this sample's GPUs for the next one: (index, double-bit ECC, remap failure,
    PCI bus id) per GPU, as plain tuples (the decoded readings would cost 4 KB per GPU)."""
    window.last_key = tuple(map(_REMEMBERED, sample.gpus))


def _remembered(window: NodeWindow, index: int) -> LastReading | None:
    for gpu, dbe, failure, pci_bus_id in window.last_key:
        if gpu == index:
            return LastReading(dbe, failure, _interned_pci(pci_bus_id))
    return None


def gpus_by_pci(window: NodeWindow) -> dict[str, int]:
    """The window's GPUs by the pci_key of their bus id, as last reported (to place a log line on a GPU)."""
    return {key: gpu for gpu, _, _, pci_bus_id in window.last_key if (key := _interned_pci(pci_bus_id))}


@functools.lru_cache(maxsize=4096)
def _interned_pci(pci_bus_id: str | None) -> str | None:
    key = pci_key(pci_bus_id) if pci_bus_id else None
    return sys.intern(key) if key else None


def pci_key(pci_bus_id: str) -> str | None:
    """Normalise '0000:65:00', '00000000:65:00.0' and '65:00.0' to one key ('65:00') to match logs to GPUs."""
    match = _PCI.match(pci_bus_id.strip())
    if not match:
        return None
    return f"{match.group('bus').lower()}:{match.group('dev').lower()}"
