"""The NVIDIA Xid catalog as Sentinel acts on it.

Source: NVIDIA "Xid Errors" catalog (immediate-action column) as summarised in shared/notes/domain.md, with the
anchors' disagreements resolved towards not draining on application errors: 13/31/43/45 and friends come from
the application (Meta GCM and Azure healthagent treat them as non-critical), so alone they never drain.
Hardware faults whose catalog action is "reset GPU" or "reboot node" drain: a GPU reset kills the job on that
GPU anyway, so the job must move and the node must leave the pool until an operator resets it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sentinel.events import Recommendation, Severity


@dataclass(frozen=True)
class XidInfo:
    meaning: str
    severity: Severity
    recommendation: Recommendation


_FATAL = (Severity.FATAL, Recommendation.DRAIN)
_WATCH = (Severity.WARNING, Recommendation.ALERT)
_APP = (Severity.INFO, Recommendation.NONE)

CATALOG: dict[int, XidInfo] = {
    code: XidInfo(meaning, *action)
    for code, meaning, action in [
        (8, "GPU stopped processing (FIFO idle timeout): restart app", _APP),
        (13, "graphics engine exception, usually the application: restart app", _APP),
        (31, "GPU memory page fault, usually the application: restart app", _APP),
        (32, "corrupted push buffer: restart app", _APP),
        (43, "GPU stopped processing, GPU healthy: ignore", _APP),
        (45, "preemptive cleanup, sympathetic to other Xids: follow the other Xid", _APP),
        (46, "GPU stopped processing (timeout): reset GPU", _FATAL),
        (48, "double-bit ECC error: reset GPU or reboot node", _FATAL),
        (54, "auxiliary power not connected: check mechanicals", _FATAL),
        (61, "PMU breakpoint: contact support", _WATCH),
        (62, "internal micro-controller halt: reset GPU", _FATAL),
        (63, "row-remap / page retirement event: reset to activate", _APP),
        (64, "row-remap failure: reset GPU", _FATAL),
        (68, "NVDEC exception: restart app", _APP),
        (74, "NVLink error: reset GPU or reboot", _FATAL),
        (79, "GPU has fallen off the bus: reboot node", _FATAL),
        (92, "excessive single-bit ECC interrupts: watch the rate", _WATCH),
        (94, "contained ECC error: restart app, reset GPU when convenient", _WATCH),
        (95, "uncontained ECC error: reset GPU", _FATAL),
        (109, "context-switch timeout: reset GPU", _FATAL),
        (110, "security fault: reset GPU", _FATAL),
        (119, "GSP RPC timeout: reset GPU, reboot if it persists", _FATAL),
        (120, "GSP error: reset GPU, reboot if it persists", _FATAL),
        (136, "link training failed: reset GPU", _FATAL),
        (140, "unrecoverable ECC error escaped remapping: reset GPU", _FATAL),
        (143, "GPU init error: reset GPU", _FATAL),
        *[(code, "NVLink5 error, decoded per sub-code: evaluate", _WATCH) for code in range(144, 151)],
        (155, "NVLink software-defined error: reset GPU", _FATAL),
        (156, "NVLink resource retirement: reset GPU", _FATAL),
        (158, "NVLink fatal timeout: reset GPU", _FATAL),
    ]
}

_RECOVERY_TARGET = re.compile(r"\bto\s+0x(?P<code>[0-9a-fA-F]+)\s*\((?P<name>[^)]*)\)")

UNKNOWN = XidInfo("Xid not in Sentinel's catalog: an operator should look", Severity.WARNING, Recommendation.ALERT)


def classify(code: int, message: str = "") -> XidInfo:
    """Catalog entry for ``code``; Xid 154 (recovery action changed) is judged from the action it names."""
    if code == 154:
        # "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)": judge the new action.
        match = _RECOVERY_TARGET.search(message)
        if match and int(match.group("code"), 16) != 0:
            return XidInfo(f"GPU recovery action now {match.group('name')}", *_FATAL)
        if match:
            return XidInfo("GPU recovery action cleared", Severity.INFO, Recommendation.NONE)
        return XidInfo("GPU recovery action changed", *_WATCH)
    return CATALOG.get(code, UNKNOWN)
