"""Fault models the minimal simulator injects, and the demo's fault plan.

Each fault names its node, GPU and onset; ``fatal`` faults must be detected and their node drained, benign
ones must never cause an action. Kernel-log lines use the real ``NVRM: Xid`` format (domain.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum


class FaultKind(StrEnum):
    XID79 = "xid79"  # GPU fallen off the bus, no precursor
    XID48 = "xid48"  # double-bit ECC error, no precursor
    THERMAL = "thermal"  # cooling degrades: temperature climbs until hardware slowdown, then the GPU is lost
    XID13 = "xid13"  # graphics engine exception from the application: benign for the node


FATAL_KINDS = (FaultKind.XID79, FaultKind.XID48, FaultKind.THERMAL)

THERMAL_RISE_C_PER_S = 0.1  # 6 C per minute once cooling has failed
THERMAL_SLOWDOWN_C = 98.0  # hardware thermal slowdown engages
THERMAL_SHUTDOWN_C = 105.0  # the GPU stops answering (reported as Xid 79)


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    node: str
    gpu: int
    onset_ts: float

    @property
    def fatal(self) -> bool:
        return self.kind in FATAL_KINDS


def xid_line(xid: int, pci_bus_id: str, text: str) -> str:
    """A kernel-log line as the NVIDIA driver writes it."""
    domain_bus_dev = pci_bus_id[4:-2] if len(pci_bus_id) == 16 else pci_bus_id
    return f"NVRM: Xid (PCI:{domain_bus_dev}): {xid}, {text}"


XID_TEXT = {
    79: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    48: "pid=2231, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
    "at partition 6, subpartition 0.",
    13: "pid=48211, name=python, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
}


def min_duration_s() -> float:
    """The shortest demo run in which every planned fault plays out: a cooled thermal runaway, plus a minute
    before it starts and a minute after shutdown (``demo_plan``)."""
    return (THERMAL_SHUTDOWN_C - 30.0) / THERMAL_RISE_C_PER_S + 120.0


def demo_plan(
    nodes: list[str],
    gpus: int,
    start_ts: float,
    duration_s: float,
    rng: random.Random,
    per_kind: int = 2,
    benign: int = 3,
) -> list[Fault]:
    """``per_kind`` faults of each fatal kind and ``benign`` Xid 13s, each on its own node, spread in time.

    Thermal faults start early enough to run away within the run; the instant faults land anywhere in the
    middle of it, so the detector always has history for the node first.
    """
    needed = per_kind * len(FATAL_KINDS) + benign
    if needed > len(nodes):
        raise ValueError(f"the demo plan needs {needed} nodes, the cluster has {len(nodes)}")
    chosen = rng.sample(nodes, needed)
    # After a drain the GPU idles ~33 C cooler, so the runaway takes longer to reach shutdown; start early
    # enough that it still completes within the run (the demo measures lead time against it).
    cooled_runaway_s = (THERMAL_SHUTDOWN_C - 30.0) / THERMAL_RISE_C_PER_S
    faults: list[Fault] = []
    for i, node in enumerate(chosen):
        kind = FATAL_KINDS[i // per_kind] if i < per_kind * len(FATAL_KINDS) else FaultKind.XID13
        if kind is FaultKind.THERMAL:
            latest = max(duration_s - cooled_runaway_s - 60.0, 120.0)
            onset = start_ts + rng.uniform(60.0, latest)
        else:
            onset = start_ts + rng.uniform(0.15 * duration_s, 0.85 * duration_s)
        faults.append(Fault(kind, node, rng.randrange(gpus), onset))
    return sorted(faults, key=lambda f: f.onset_ts)
