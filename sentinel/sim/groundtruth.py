"""The ground truth of a scenario: which fault (or benign event) hits which node and GPU, when its precursor
starts and when it fails. Drawn once from the scenario's seed, before any telemetry is generated, so the
stream and the score can both be checked against it; exportable as a labelled training set.

Counts per class are Poisson with mean ``rate × node-days / 1000``; failure times are uniform over the run;
a fault without a precursor has ``precursor_start_s == failure_s``; GSP, fail-slow, silent and software faults
never have one (``scenario.NO_PRECURSOR``).
"""

from __future__ import annotations

import csv
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sentinel.sim.scenario import NO_PRECURSOR, BenignClass, FaultClass, Scenario

# What each class finally does, in the words the detector sees (catalog in domain.md).
SIGNATURE = {
    FaultClass.HBM: "Xid 48 / 94 / 95 after rising correctable ECC and pending row remaps (Xid 63/64)",
    FaultClass.THERMAL: "hardware thermal slowdown, then the GPU is lost (Xid 79)",
    FaultClass.NVLINK: "Xid 74 after rising NVLink CRC / replay errors",
    FaultClass.PCIE: "Xid 79 after a rising PCIe replay counter (or none)",
    FaultClass.GSP: "Xid 119 or 120",
    FaultClass.INFINIBAND: "link_downed after symbol errors and link error recovery",
    FaultClass.FAIL_SLOW: "one GPU's clocks drop; the job's step time grows",
    FaultClass.SILENT: "the GPU or host fails with no warning (Xid 79 / node down)",
    FaultClass.SOFTWARE: "the job dies (NCCL timeout); the hardware is healthy",
}
NEEDS_DRAIN = {c: c not in (FaultClass.SOFTWARE, FaultClass.FAIL_SLOW) for c in FaultClass}
HBM_FAILURE_XIDS = (48, 94, 95)
# NVIDIA's Xid catalog (domain.md; decision 0018): Xid 94, a *contained* ECC error, asks to restart the application
# and reset the GPU when convenient; the job restarts, the node need not be drained. An HBM fault that ends in it
# with no precursor is therefore no drain in the ground truth. With a precursor (escalating correctable errors,
# pending remaps) the memory is wearing out and the GPU needs its reset: a drain, as for Xid 48 and 95.
CONTAINED_XID = 94


@dataclass(frozen=True)
class TruthEvent:
    id: str
    kind: str  # "fault" | "benign" | "storm"
    cls: str  # a FaultClass or BenignClass value, or "storm"
    node: str
    gpu: int  # -1 when the event is not about one GPU (InfiniBand port, software, host)
    precursor_start_s: float  # seconds from the start of the run
    failure_s: float
    has_precursor: bool
    needs_drain: bool
    failure_xid: int = 0  # the Xid an HBM fault ends in (HBM_FAILURE_XIDS); 0 for the other classes


def node_name(index: int) -> str:
    return f"sim-node-{index + 1:05d}"


def node_index(name: str) -> int:
    """The index of a simulated node from its name (``node_name``'s inverse)."""
    return int(name.rsplit("-", 1)[1]) - 1


def plan(scenario: Scenario) -> list[TruthEvent]:
    """Every fault, benign event and storm report of the scenario, ordered by time (same seed, same plan)."""
    events: list[TruthEvent] = []
    for cls in FaultClass:
        rng = _stream(scenario.seed, "fault", cls.value)
        spec = scenario.faults.spec(cls)
        count = int(rng.poisson(spec.rate_per_1000_node_days * scenario.node_days / 1000.0))
        for _ in range(count):
            failure = float(rng.uniform(0.0, scenario.duration_s))
            draw = rng.random()
            warned = cls not in NO_PRECURSOR and bool(draw >= spec.no_precursor_share) and spec.precursor_s[1] > 0
            lead = float(rng.uniform(*spec.precursor_s)) if warned else 0.0
            gpu = -1 if cls in (FaultClass.INFINIBAND, FaultClass.SOFTWARE) else int(
                rng.integers(scenario.gpus_per_node))
            events.append(TruthEvent("", "fault", cls.value, node_name(int(rng.integers(scenario.nodes))), gpu,
                                     max(0.0, failure - lead), failure, warned, NEEDS_DRAIN[cls]))
    for benign in BenignClass:
        rng = _stream(scenario.seed, "benign", benign.value)
        count = int(rng.poisson(scenario.benign.spec(benign).rate_per_1000_node_days * scenario.node_days / 1000.0))
        for _ in range(count):
            at = float(rng.uniform(0.0, scenario.duration_s))
            gpu = -1 if benign in (BenignClass.REBOOT, BenignClass.DRIVER_RELOAD) else int(
                rng.integers(scenario.gpus_per_node))
            events.append(TruthEvent("", "benign", benign.value, node_name(int(rng.integers(scenario.nodes))), gpu,
                                     at, at, False, False))
    if scenario.storm is not None:
        rng = _stream(scenario.seed, "storm", "")
        storm = scenario.storm
        hit = rng.choice(scenario.nodes, size=max(1, round(storm.fraction * scenario.nodes)), replace=False)
        for index in sorted(int(i) for i in hit):
            at = min(storm.at_s + float(rng.uniform(0.0, storm.spread_s)), scenario.duration_s)
            events.append(TruthEvent("", "storm", f"storm-xid{storm.xid}", node_name(index),
                                     int(rng.integers(scenario.gpus_per_node)), at, at, False, False))
    events.sort(key=lambda e: (e.failure_s, e.node, e.cls))
    return [_with_failure_xid(TruthEvent(**{**asdict(e), "id": f"{scenario.name}-{i:06d}"}))
            for i, e in enumerate(events)]


def _with_failure_xid(event: TruthEvent) -> TruthEvent:
    """An HBM fault's final Xid, drawn from its id (so no other draw moves), and whether it needs a drain."""
    if event.cls != FaultClass.HBM.value:
        return event
    rng = np.random.default_rng(zlib.crc32(f"hbm-xid:{event.id}".encode()))
    xid = int(rng.choice(HBM_FAILURE_XIDS))
    return TruthEvent(**{**asdict(event), "failure_xid": xid,
                         "needs_drain": event.has_precursor or xid != CONTAINED_XID})


# The demo's fault plan (``demo_plan``): two faults of each class, each with the lead its precursor gives (s).
DEMO_FAULTS = {FaultClass.THERMAL: (300.0, 600.0), FaultClass.HBM: (600.0, 1200.0), FaultClass.SILENT: (0.0, 0.0)}
DEMO_WARM_UP_S = 300.0  # no precursor starts before the detector's windows have filled, no failure in the last


def demo_min_duration_s() -> float:
    """The shortest run in which the longest precursor of ``DEMO_FAULTS`` plays out after the warm-up."""
    return max(high for _, high in DEMO_FAULTS.values()) + 2 * DEMO_WARM_UP_S


def demo_plan(scenario: Scenario, per_class: int = 2, benign: int = 3) -> list[TruthEvent]:
    """A fixed plan on the scenario's fleet: ``per_class`` faults of each ``DEMO_FAULTS`` class and ``benign``
    application Xids (13), each on its own node, drawn from the scenario's seed. The failures fall after the
    warm-up plus their precursor and before the run's last ``DEMO_WARM_UP_S``."""
    needed = per_class * len(DEMO_FAULTS) + benign
    if needed > scenario.nodes:
        raise ValueError(f"the demo plan needs {needed} nodes, the cluster has {scenario.nodes}")
    if scenario.duration_s < demo_min_duration_s():
        raise ValueError(f"the demo plan needs at least {demo_min_duration_s():.0f} s, got {scenario.duration_s:g}")
    rng = _stream(scenario.seed, "demo", "")
    chosen = [int(i) for i in rng.choice(scenario.nodes, size=needed, replace=False)]
    classes = [cls for cls in DEMO_FAULTS for _ in range(per_class)]
    end = scenario.duration_s - DEMO_WARM_UP_S
    events = []
    for index, cls in zip(chosen, classes, strict=False):
        low, high = DEMO_FAULTS[cls]
        lead = float(rng.uniform(low, high)) if high else 0.0
        failure = float(rng.uniform(DEMO_WARM_UP_S + lead, end))
        events.append(TruthEvent("", "fault", cls.value, node_name(index), int(rng.integers(scenario.gpus_per_node)),
                                 failure - lead, failure, lead > 0, NEEDS_DRAIN[cls]))
    for index in chosen[len(classes):]:
        at = float(rng.uniform(0.15 * scenario.duration_s, 0.85 * scenario.duration_s))
        events.append(TruthEvent("", "benign", BenignClass.APP_XID.value, node_name(index),
                                 int(rng.integers(scenario.gpus_per_node)), at, at, False, False))
    events.sort(key=lambda e: (e.failure_s, e.node, e.cls))
    return [_with_failure_xid(TruthEvent(**{**asdict(e), "id": f"{scenario.name}-{i:06d}"}))
            for i, e in enumerate(events)]


def _stream(seed: int, kind: str, name: str) -> np.random.Generator:
    """An independent random stream per class (keyed by its name), so adding or changing one class's rate never
    reshuffles the events of the others."""
    return np.random.default_rng([seed, zlib.crc32(f"{kind}:{name}".encode())])


def export_csv(events: list[TruthEvent], path: Path) -> None:
    """Write the ground truth as CSV (one row per event), the label file of a training export."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(TruthEvent.__dataclass_fields__))
        writer.writeheader()
        for event in events:
            writer.writerow(asdict(event))
