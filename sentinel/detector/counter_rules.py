"""Warnings on GPU error counters, at the thresholds existing tools alert on: the first sign an operator's own
dashboards would show, so Sentinel speaks at the same limits they do (`sentinel-bench alerting` measures how
the timing compares). These only alert; whether the GPU is about to fail (checkpoint, then drain) is the hazard
model's call, made on the whole window.

- PCIe replays above 8 per minute: DCGM's hardware limit for the PCIe replay counter (domain.md).
- NVLink CRC flit errors above 100 per second: DCGM's NVLink health threshold (domain.md).
- Row remap pending: the HBM has a row waiting to be remapped at the next GPU reset; Azure healthagent warns on
  pending retirements (domain.md). The hazard model reads the same flag with the counters around it.

Link faults, where two physical signals of the same link agree (``link_rules``; docs/detection.md):

- NVLink replays or recoveries: DCGM's health watch fails a GPU on any increase of either counter. One retrain
  alone is something a healthy link does now and then, so an increase alone alerts; with CRC errors on the same
  GPU's links in the window (at least ``LINK_CRC_MIN``) and at least ``LINK_RETRY_MIN`` replays or recoveries, the
  link is going: checkpoint, then drain.
- PCIe link downtraining: a link trained below its maximum width is degraded (NVSentinel issue 890); alone it
  alerts; with PCIe replays in the window (at least ``PCIE_REPLAY_MIN``) the link is failing: checkpoint, then
  drain. The generation is not judged: GPUs lower it at idle by design (link power management).

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
_REPLAY, _DOWNTRAINED = GPU_FIELDS.index("nvlink_replay"), GPU_FIELDS.index("pcie_downtrained")
LINK_CRC_MIN = 10  # CRC errors over the window that make replays a second signal, not a lone retrain (assumption)
LINK_RETRY_MIN = 2  # NVLink replays plus recoveries over the window (one is a link that retrained once)
PCIE_REPLAY_MIN = 5  # PCIe replays over the window on a downtrained link (assumption)


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
    out += link_rules(window, sample, now, last)
    return out


def link_rules(window: NodeWindow, sample: SampleView, now: float, last: np.ndarray) -> list[Finding]:
    """The NVLink and PCIe link rules (module docstring): one signal alerts, two agreeing ones checkpoint and drain.
    Counts are over the whole window; an episode ends when its signals are gone from it."""
    gpu = window.recent(window.gpu, window.size)
    counts = np.nan_to_num(np.clip(np.diff(gpu[:, [_PCIE, _NVLINK, _REPLAY]], axis=0), 0, None)).sum(axis=0) \
        if len(gpu) >= 2 else np.zeros((3, gpu.shape[2]))
    replays, crc, retries = counts
    downtrained = np.nan_to_num(last[_DOWNTRAINED]) > 0
    out: list[Finding] = []
    for g in range(len(retries)):
        out += _link(window, sample, now, g, "nvlink", FindingClass.GPU_NVLINK, retries[g] > 0,
                     retries[g] >= LINK_RETRY_MIN and crc[g] >= LINK_CRC_MIN,
                     {"nvlink_replays_recoveries": int(retries[g]), "nvlink_crc_errors": int(crc[g])},
                     f"{int(retries[g])} NVLink replay/recovery error(s) and {int(crc[g])} CRC errors")
        out += _link(window, sample, now, g, "pcie", FindingClass.GPU_PCIE, bool(downtrained[g]),
                     bool(downtrained[g]) and replays[g] >= PCIE_REPLAY_MIN,
                     {"pcie_downtrained": bool(downtrained[g]), "pcie_replays": int(replays[g])},
                     f"PCIe link downtrained (below its maximum width), {int(replays[g])} PCIe replays")
    return out


def _link(window: NodeWindow, sample: SampleView, now: float, gpu: int, link: str, kind: FindingClass,
          one: bool, two: bool, evidence: dict[str, EvidenceValue], what: str) -> list[Finding]:
    """One GPU's episode of one link rule: level 1 (alerted) on one signal, 2 (checkpoint and drain) on two."""
    alert, drain = (f"{link}-link-degraded", 1), (f"{link}-link-failing", 2)
    level = 2 if two else 1 if one else 0
    open_level = 2 if (drain[0], gpu) in window.counter_reported else 1 if (alert[0], gpu) in window.counter_reported \
        else 0
    if level == 0:
        window.counter_reported.discard((alert[0], gpu))
        window.counter_reported.discard((drain[0], gpu))
        return []
    if level <= open_level:
        return []
    rule = drain[0] if level == 2 else alert[0]
    window.counter_reported.add((rule, gpu))
    evidence = {**evidence, "window_s": round(float(window.last_ts - window.recent(window.node, window.size)[0, 0]), 1)}
    if level == 2:
        return [make_finding(rule, kind, sample.node, now, sample.ts, Severity.CRITICAL,
                             Recommendation.CHECKPOINT_DRAIN, 0.9,
                             f"GPU {gpu}: {what} in the window: two signals of a failing link", gpu, evidence)]
    return [make_finding(rule, kind, sample.node, now, sample.ts, Severity.WARNING, Recommendation.ALERT, 0.5,
                         f"GPU {gpu}: {what} in the window: one signal, alert", gpu, evidence)]


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
