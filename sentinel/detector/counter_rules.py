"""Warnings on GPU error counters, at the thresholds existing tools alert on: the first sign an operator's own
dashboards would show, so Sentinel speaks at the same limits they do (`sentinel-bench alerting` measures how
the timing compares). These only alert; whether the GPU is about to fail (checkpoint, then drain) is the hazard
model's call, made on the whole window.

- PCIe replays above 8 per minute: DCGM's hardware limit for the PCIe replay counter (domain.md).
- NVLink CRC flit errors above 100 per second: DCGM's NVLink health threshold (domain.md).
- Row remap pending: the HBM has a row waiting to be remapped at the next GPU reset; Azure healthagent warns on
  pending retirements (domain.md). The hazard model reads the same flag with the counters around it.

Rates are over the last ``RATE_WINDOW_S`` seconds of samples; a counter that goes backwards (driver reload,
reset) counts as zero for that step. Each warning fires once per episode; the episode ends when the rate falls
below half its limit (or the pending flag clears).
"""

from __future__ import annotations

import numpy as np

from sentinel.counters import rate_per_h
from sentinel.detector.findings import make_finding
from sentinel.detector.sample_view import SampleView
from sentinel.detector.windows import GPU_FIELDS, NodeWindow
from sentinel.events import EvidenceValue, Finding, FindingClass, Recommendation, Severity

RATE_WINDOW_S = 60.0
PCIE_REPLAYS_PER_MIN = 8.0  # DCGM
NVLINK_CRC_PER_S = 100.0  # DCGM
_PCIE, _NVLINK, _PENDING = (GPU_FIELDS.index(n) for n in ("pcie_replay", "nvlink_crc", "remap_pending"))


def counter_warnings(window: NodeWindow, sample: SampleView, now: float) -> list[Finding]:
    if window.count < 2:
        return []
    if not window.counters_moved and not window.counter_reported:
        return []  # nothing counted this step and no episode open: the common case (noted by the push)
    last = window.recent(window.gpu, 1)[-1]
    ts = window.recent(window.node, window.size)[:, 0]
    recent = ts >= ts[-1] - RATE_WINDOW_S
    per_s = rate_per_h(window.recent(window.gpu, window.size)[recent], ts[recent]) / 3600.0
    out: list[Finding] = []
    out += _episodes(window, sample, now, "pcie-replay-rate", FindingClass.GPU_PCIE, per_s[_PCIE] * 60,
                     PCIE_REPLAYS_PER_MIN, "PCIe replays/min")
    out += _episodes(window, sample, now, "nvlink-crc-rate", FindingClass.GPU_NVLINK, per_s[_NVLINK],
                     NVLINK_CRC_PER_S, "NVLink CRC errors/s")
    pending = np.nan_to_num(last[_PENDING]) > 0
    out += _episodes(window, sample, now, "row-remap-pending", FindingClass.GPU_ECC, pending.astype(float), 0.5,
                     "row remap pending")
    return out


def _episodes(window: NodeWindow, sample: SampleView, now: float, rule: str, kind: FindingClass,
              value: np.ndarray, limit: float, what: str) -> list[Finding]:
    out: list[Finding] = []
    for gpu in range(len(value)):
        key = (rule, gpu)
        if value[gpu] < limit / 2:
            window.counter_reported.discard(key)
        if value[gpu] <= limit or key in window.counter_reported:
            continue
        window.counter_reported.add(key)
        if rule == "row-remap-pending":
            summary = f"GPU {gpu}: a row remap is pending (applied at the next GPU reset)"
            evidence: dict[str, EvidenceValue] = {"remap_pending": True}
        else:
            summary = f"GPU {gpu}: {value[gpu]:.1f} {what} over the last minute (limit {limit:g})"
            evidence = {"rate": round(float(value[gpu]), 2), "limit": limit, "window_s": RATE_WINDOW_S}
        out.append(make_finding(rule, kind, sample.node, now, sample.ts, Severity.WARNING, Recommendation.ALERT,
                                0.5, summary, gpu, evidence))
    return out
