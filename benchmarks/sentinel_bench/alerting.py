"""``sentinel-bench alerting``: time from fault onset to the first alert, Sentinel beside what users run today.

Both systems watch the same simulated fleet (``sentinel.sim``: each fault class with its precursor and failure
signature) on the same clock:
- **Prometheus** (the real binary) scrapes a dcgm-exporter-style endpoint per node and evaluates static
  thresholds (``promstack.baseline_rules``) every scrape; the time of an alert is the first evaluation at which
  ``ALERTS{alertstate="firing"}`` holds it, read back from Prometheus.
- **Sentinel** runs its real in-process pipeline (detector, policy) on the same samples and Xid events; the time
  of an alert is when its first incident on the node was graded into an operator-facing alert (docs/alerts.md).

Time is accelerated: one 10 s simulated step lasts ``step_wall_s`` of wall time, and Prometheus scrapes and
evaluates once per step (a 10 s scrape interval in simulated time, the most favourable setting for it: every
sample is seen). Rule windows are scaled by the same factor. A fault's onset is the start of its precursor (its
failure, when it has none); an alert counts for a fault when it lands on its node between the onset and
``GRACE_S`` after the failure. Nodes without a fault (benign events, healthy) that get any alert are counted as
false-alert nodes.
"""

from __future__ import annotations

import bisect
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sentinel import codec
from sentinel.actuator.steps import DryRunActuator
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.daemon import build_pipeline, open_repository
from sentinel.errors import ValidationError
from sentinel.events import TelemetrySample
from sentinel.obs.metrics import Metrics
from sentinel.sim import scenario
from sentinel.sim.fleet import Fleet
from sentinel.sim.groundtruth import TruthEvent, node_name
from sentinel.sim.trainset import cached_model
from sentinel.tables import render
from sentinel.transport import LOGS, TELEMETRY
from sentinel_bench.baselines import Signal
from sentinel_bench.detect import episodes
from sentinel_bench.promstack import Exporter, Prometheus, baseline_rules, exposition

CLASSES = ("hbm", "thermal", "nvlink", "pcie", "infiniband", "gsp", "silent")
WITH_PRECURSOR = {"hbm", "thermal", "nvlink", "pcie", "infiniband"}
GRACE_S = 120.0
WARMUP_S = 60.0
STEP_S = 10.0


@dataclass(frozen=True)
class Options:
    per_class: int = 3
    classes: tuple[str, ...] = CLASSES
    precursor_s: tuple[float, float] = (300.0, 900.0)
    duration_s: float = 2400.0
    step_wall_s: float = 0.5
    healthy_nodes: int = 4
    benign_nodes: int = 2  # alternately an application Xid (13/31/43) and a 15 C temperature spike
    seed: int = 11
    model: str | None = None  # hazard model directory; "" rules only; None the cached model of `bench detect`
    background: bool = True  # the healthy-fleet background under the faults (docs/simulator.md)

    def check(self) -> None:
        unknown = set(self.classes) - set(CLASSES)
        if unknown:
            raise ValidationError(f"unknown fault class(es) {sorted(unknown)}; valid: {', '.join(CLASSES)}")
        if self.per_class < 1 or not 0.05 <= self.step_wall_s <= 10:
            raise ValidationError("per_class must be >= 1 and step_wall_s in [0.05, 10]")
        if self.duration_s - GRACE_S <= WARMUP_S + self.precursor_s[1]:
            raise ValidationError(f"duration_s must exceed {WARMUP_S + GRACE_S + self.precursor_s[1]:.0f} s "
                                  "(warm-up, the longest precursor and the grace period)")


def plan(options: Options) -> tuple[scenario.Scenario, list[TruthEvent]]:
    """``per_class`` faults of each class, each on its own node, then benign and healthy nodes (seeded)."""
    options.check()
    rng = np.random.default_rng(options.seed)
    events: list[TruthEvent] = []
    for cls in options.classes:
        for _ in range(options.per_class):
            lead = float(rng.uniform(*options.precursor_s)) if cls in WITH_PRECURSOR else 0.0
            failure = float(rng.uniform(WARMUP_S + lead, options.duration_s - GRACE_S))
            gpu = -1 if cls == "infiniband" else int(rng.integers(8))
            events.append(TruthEvent(f"alerting-{len(events):04d}", "fault", cls, node_name(len(events)), gpu,
                                     failure - lead, failure, lead > 0, True))
    for k in range(options.benign_nodes):
        at = float(rng.uniform(WARMUP_S, options.duration_s - GRACE_S))
        events.append(TruthEvent(f"alerting-{len(events):04d}", "benign", ("app_xid", "spike")[k % 2],
                                 node_name(len(events)), int(rng.integers(8)), at, at, False, False))
    nodes = len(events) + options.healthy_nodes
    sc = scenario.from_mapping({"name": "alerting", "seed": options.seed, "duration_s": options.duration_s,
                                "step_s": STEP_S, "nodes": nodes, "job_nodes": min(4, nodes),
                                "background": {"enabled": options.background}})
    return sc, events


def run_alerting(options: Options | None = None, progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    options = options or Options()
    sc, truth = plan(options)
    fleet = Fleet(sc, truth)
    nodes = [node_name(i) for i in range(sc.nodes)]
    speedup = STEP_S / options.step_wall_s
    steps = int(sc.duration_s / STEP_S)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        model = cached_model() if options.model is None else options.model
        config = from_mapping({"store": {"url": f"sqlite:///{tmp}/alerting.db"},
                               "detector": {"record_interval_s": 300, "hazard": {"model": model},
                                            "host_anomaly": {"state_dir": f"{tmp}/host"}}})
        clock = ManualClock(fleet.start_ts)
        pipeline = build_pipeline(config, clock, Metrics(), open_repository(config, migrate=True),
                                  actuator=DryRunActuator(clock))
        exporter = Exporter()
        prom = Prometheus(exporter.port, nodes, baseline_rules(speedup), options.step_wall_s)
        xids: dict[str, dict[int, int]] = {}
        walls: list[float] = []
        sim_t: list[float] = []
        overruns, t0 = 0, time.monotonic()
        try:
            for k in range(steps):
                if k == 1:  # the first step's pages are up: let Prometheus find every target before time runs
                    prom.wait_scraping(len(nodes))
                    t0 = time.monotonic()
                step = fleet.step()
                clock.advance(STEP_S)
                for node, gpu, code, _ in step.logs:
                    xids.setdefault(node_name(node), {})[gpu] = code
                samples = fleet.samples(step)
                newest: dict[str, TelemetrySample] = {}  # an exporter's page shows its newest reading only
                for s in samples:
                    if s.node not in newest or s.ts > newest[s.node].ts:
                        newest[s.node] = s
                exporter.publish({node: exposition(s, xids.get(node, {})) for node, s in newest.items()})
                walls.append(time.time())
                sim_t.append(step.t_s)
                for event in fleet.logs(step):
                    pipeline.transport.publish(LOGS, event.node, codec.encode(event))
                for s in samples:
                    pipeline.transport.publish(TELEMETRY, s.node, codec.encode(s))
                pipeline.pump()
                if k >= 1:
                    pause = t0 + k * options.step_wall_s - time.monotonic()
                    overruns += pause < 0
                    time.sleep(max(pause, 0.0))
                if progress is not None and k % 20 == 0:
                    progress(k / steps)
            time.sleep(3 * options.step_wall_s)  # the last step's scrape and evaluation
            firing = prom.firing(walls[0])
        finally:
            prom.close()
            exporter.close()
        # what reaches a person: incidents graded into an alert (docs/alerts.md), not every finding
        ours = [(i["node"], i["alert_ts"] - fleet.start_ts)
                for i in pipeline.repo.table("incidents", order_by="opened_ts")
                if i["alert_ts"] is not None and not i["alert_held"]]
    theirs = [(node, sim_t[i]) for _, node, wall in firing if (i := bisect.bisect_right(walls, wall) - 1) >= 0]
    result = score(truth, {"sentinel": ours, "prometheus": theirs})
    result.update({"background": options.background, "nodes": sc.nodes, "duration_s": sc.duration_s,
                   "step_s": STEP_S, "step_wall_s": options.step_wall_s, "speedup": speedup, "seed": options.seed,
                   "overruns": overruns,
                   "prometheus_alerts": sorted({name for name, _, _ in firing}),
                   "wall_s": round(time.monotonic() - started, 1)})
    return result


def score(truth: list[TruthEvent], signals: dict[str, list[tuple[str, float]]]) -> dict[str, Any]:
    """Per fault, the first alert of each system in [onset, failure + GRACE_S] on its node; medians per class."""
    faults = [e for e in truth if e.kind == "fault"]
    out: dict[str, Any] = {"faults": len(faults), "by_class": {}}
    delays: dict[str, dict[str, list[float]]] = {name: {} for name in signals}
    early: dict[str, dict[str, int]] = {name: {} for name in signals}
    for name, alerts in signals.items():
        by_node: dict[str, list[float]] = {}
        for node, t in alerts:
            by_node.setdefault(node, []).append(t)
        for f in faults:
            hits = [t for t in by_node.get(f.node, []) if f.precursor_start_s <= t <= f.failure_s + GRACE_S]
            if hits:
                delays[name].setdefault(f.cls, []).append(min(hits) - f.precursor_start_s)
                early[name][f.cls] = early[name].get(f.cls, 0) + (min(hits) < f.failure_s)
        faulty = {f.node for f in faults}
        out[f"{name}_false_alert_nodes"] = len({node for node, _ in alerts if node not in faulty})
        # paged as an operator is: one per node episode (benchmarks.detect.episodes), on nodes with no fault
        paged = episodes([Signal(node, t, False) for node, t in alerts if node not in faulty])
        out[f"{name}_false_alerts"] = len(paged)
        every = [d for values in delays[name].values() for d in values]
        out[f"{name}_detected"] = len(every)
        out[f"{name}_before_failure"] = sum(early[name].values())
        out[f"{name}_s_median"] = _median(every)
    for cls in sorted({f.cls for f in faults}):
        row: dict[str, Any] = {"faults": sum(f.cls == cls for f in faults)}
        for name in signals:
            found = delays[name].get(cls, [])
            row.update({f"{name}_detected": len(found), f"{name}_s_median": _median(found),
                        f"{name}_before_failure": early[name].get(cls, 0)})
        out["by_class"][cls] = row
    return out


def _median(values: list[float]) -> float | None:
    return round(float(np.median(values)), 1) if values else None


def render_alerting(r: dict[str, Any]) -> str:
    rows = [{"class": cls, **row} for cls, row in r["by_class"].items()]
    rows.append({"class": "all", "faults": r["faults"], **{k: r[k] for k in (
        "sentinel_detected", "sentinel_s_median", "sentinel_before_failure", "prometheus_detected",
        "prometheus_s_median", "prometheus_before_failure")}})
    table = render(rows, [("class", "fault class"), ("faults", "faults"),
                          ("sentinel_detected", "sentinel found"), ("sentinel_s_median", "sentinel s"),
                          ("sentinel_before_failure", "before failure"),
                          ("prometheus_detected", "prometheus found"), ("prometheus_s_median", "prometheus s"),
                          ("prometheus_before_failure", "before failure")])
    return (f"{r['nodes']} simulated nodes x 8 GPUs, {r['duration_s']:.0f} s at {r['step_s']:.0f} s steps, "
            f"{r['speedup']:g}x faster than real time (Prometheus scrapes and evaluates every step)\n"
            "median seconds from fault onset (precursor start) to the first alert:\n" + table
            + f"\n\nfalse alerts (one per node episode): sentinel {r['sentinel_false_alerts']} on "
              f"{r['sentinel_false_alert_nodes']} node(s), prometheus {r['prometheus_false_alerts']} on "
              f"{r['prometheus_false_alert_nodes']}; Prometheus rules that fired: "
              f"{', '.join(r['prometheus_alerts']) or 'none'}; late steps: {r['overruns']}; wall {r['wall_s']} s")
