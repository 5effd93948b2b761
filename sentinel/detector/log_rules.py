"""Kernel-log events other than Xids that must act as Xids do: NVSwitch errors (SXid) and fatal NIC errors.

An SXid marked Fatal means the node's NVSwitch fabric needs a reset (every GPU on the node loses NVLink): drain.
A Non-fatal SXid is evidence to alert on. A NIC line the patterns mark fatal (mlx5 unrecoverable error,
poll_health fatal, probe or load failure) means the adapter stopped working: drain. NIC warnings (TX timeouts,
a port going down) stay recorded events; the InfiniBand counter rules judge links.
"""

from __future__ import annotations

from sentinel.detector.findings import make_finding
from sentinel.events import EvidenceValue, Finding, FindingClass, LogEvent, LogKind, Recommendation, Severity


def log_rule(event: LogEvent, now: float) -> Finding | None:
    severity = event.attrs.get("severity", "").lower()
    evidence: dict[str, EvidenceValue] = {"line": event.message[:300], **{k: v for k, v in event.attrs.items()}}
    if event.kind is LogKind.SXID:
        where = f"NVSwitch {event.attrs.get('switch', '?')}"
        link = f" on link {event.attrs['link']}" if "link" in event.attrs else ""
        code = event.attrs.get("sxid", "?")
        if severity == "fatal":
            return make_finding("nvswitch-sxid", FindingClass.GPU_NVLINK, event.node, now, event.ts, Severity.FATAL,
                                Recommendation.DRAIN, 1.0, f"SXid {code} (fatal) from {where}{link}: the node's "
                                "GPU fabric needs a reset", None, evidence)
        return make_finding("nvswitch-sxid", FindingClass.GPU_NVLINK, event.node, now, event.ts, Severity.WARNING,
                            Recommendation.ALERT, 1.0, f"SXid {code} (non-fatal) from {where}{link}", None,
                            evidence)
    if event.kind is LogKind.NIC and severity == "fatal":
        device = event.attrs.get("device") or event.attrs.get("dev_name") or "a network adapter"
        return make_finding("nic-fatal", FindingClass.NIC_INFINIBAND, event.node, now, event.ts, Severity.FATAL,
                            Recommendation.DRAIN, 1.0, f"{device}: the adapter reported a fatal error", None,
                            evidence)
    return None


def dedup_key(event: LogEvent) -> tuple[str, str] | None:
    """One finding per source and error within the dedup window (drivers repeat these lines)."""
    if event.kind is LogKind.SXID:
        return f"sxid:{event.attrs.get('switch', '?')}", event.attrs.get("sxid", "?")
    if event.kind is LogKind.NIC and event.attrs.get("severity", "").lower() == "fatal":
        return f"nic:{event.attrs.get('device') or event.attrs.get('dev_name') or '?'}", "fatal"
    return None
