"""``sentinel demo``: the real pipeline against a small scenario of the fleet simulator, in accelerated time.

The fleet (``sentinel.sim.fleet``) plays a fixed plan (``groundtruth.demo_plan``: thermal and HBM faults with
their precursors, GPUs that fall off the bus without warning, application Xids that must be left alone) in the
same fault vocabulary as every scenario; a simulated scheduler (``sentinel.sim.scheduler``) runs the jobs that
the actuator checkpoints, drains and requeues, and that a fault crashes when Sentinel was too late. The
simulated hour ends at the wall-clock "now", so the demo's store reads naturally afterwards
(``sentinel incidents --since 1h``). Ground truth comes from the simulator; every outcome is read back from the
store and the simulated scheduler, not assumed.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sentinel import codec
from sentinel.actuator import OWNED_REASON_PREFIX
from sentinel.actuator.steps import SchedulerActuator
from sentinel.capacity.bins import BIN_S, LoadRecorder, bin_start
from sentinel.capacity.bins_store import record_load_bins
from sentinel.clock import ManualClock, SystemClock
from sentinel.config import Config, from_mapping
from sentinel.daemon import build_pipeline, open_repository
from sentinel.errors import ConfigError, ValidationError
from sentinel.events import SEVERITY_RANK, Severity
from sentinel.obs.metrics import Metrics
from sentinel.policy import plans
from sentinel.sim.fleet import Fleet
from sentinel.sim.groundtruth import DEMO_FAULTS, SIGNATURE, TruthEvent, demo_min_duration_s, demo_plan, node_name
from sentinel.sim.load import simulate_load, snapshot_from_scheduler
from sentinel.sim.scenario import BenignClass, FaultClass, Scenario
from sentinel.sim.scheduler import SimScheduler
from sentinel.transport import LOGS, TELEMETRY

DISRUPTIVE = {action.value for action in plans.DISRUPTIVE}


@dataclass(frozen=True)
class DemoOptions:
    nodes: int = 16
    gpus: int = 8
    duration_s: float = 3600.0
    interval_s: float = 10.0
    seed: int = 7
    db_path: str = "sentinel-demo.db"
    load_history_days: float = 14.0  # simulated queue history before the hour, for `sentinel forecast`


@dataclass
class TimelineEntry:
    ts: float
    node: str
    stage: str  # fault | finding | decision | action | job
    text: str


@dataclass
class DemoReport:
    summary: dict[str, Any]
    timeline: list[TimelineEntry] = field(default_factory=list)
    start_ts: float = 0.0


def demo_config(db_path: str) -> Config:
    """The demo acts (it drives a simulated scheduler) with a breaker sized for its fault plan."""
    return from_mapping(
        {
            "store": {"url": f"sqlite:///{db_path}"},
            "policy": {"mode": "act", "breaker": {"max_fraction": 0.5, "window_s": 3600.0}},
            # the demo's hour is shorter than a host model's warm-up: nothing of it is worth keeping on disk
            "detector": {"window_samples": 30, "host_anomaly": {"state_dir": ""}},
        }
    )


def _refuse_foreign_file(path: Path) -> None:
    """The demo recreates its store: refuse to delete a file that is not an earlier demo's (SQLite) store."""
    if not path.exists():
        return
    with open(path, "rb") as handle:
        header = handle.read(16)
    if not path.is_file() or (path.stat().st_size and header != b"SQLite format 3\x00"):
        raise ConfigError(f"--db-path {path}: exists and is not a demo store; refusing to delete it (choose "
                          "another path)")


def demo_scenario(options: DemoOptions) -> Scenario:
    """The fleet the demo simulates: two-node jobs on every node, none ending within the run."""
    return Scenario(name="demo", seed=options.seed, nodes=options.nodes, gpus_per_node=options.gpus,
                    duration_s=options.duration_s, step_s=options.interval_s, busy_fraction=1.0, job_nodes=2,
                    job_mean_s=30 * 86_400.0)


def run_demo(options: DemoOptions, progress: Callable[[float], None] | None = None) -> DemoReport:
    started = time.perf_counter()
    if options.duration_s < demo_min_duration_s():
        raise ValidationError(f"--duration: at least {math.ceil(demo_min_duration_s() / 60)}m (the longest "
                              f"precursor and the detector's warm-up), got {options.duration_s / 60:g}m")
    _refuse_foreign_file(Path(options.db_path))
    sc = demo_scenario(options)
    truth = demo_plan(sc)  # before anything is deleted or created: a fleet too small is refused first
    for suffix in ("", "-wal", "-shm"):
        Path(options.db_path + suffix).unlink(missing_ok=True)
    config = demo_config(options.db_path)
    start_ts = float(int(SystemClock().now() - options.duration_s))
    clock = ManualClock(start_ts)
    fleet = Fleet(sc, truth, start_ts)
    names = [node_name(i) for i in range(options.nodes)]
    scheduler = SimScheduler(names, clock)
    for j in range(options.nodes // 2 - 1):  # two-node jobs on all but two nodes: spare capacity for requeues
        scheduler.submit(f"job-{1001 + j}", 2)
    metrics = Metrics()
    repo = open_repository(config, migrate=True)
    pipeline = build_pipeline(config, clock, metrics, repo, actuator=SchedulerActuator(scheduler, clock))
    load_bins = _load_history(options, repo, start_ts)
    recorder, next_close = LoadRecorder(source="sim"), bin_start(start_ts) + BIN_S
    world = _World(truth, scheduler, start_ts)
    ticks = int(options.duration_s / options.interval_s)
    for tick in range(ticks):
        step = fleet.step()
        clock.advance(options.interval_s)
        world.advance(step.t_s)
        samples, logs = fleet.samples(step), fleet.logs(step)
        recorder.observe(samples)
        if clock.now() >= next_close:  # a bin closed: the queue as it stands, with the bin's GPU utilisation
            closed = recorder.close(snapshot_from_scheduler(scheduler, options.gpus, next_close))
            record_load_bins(repo.engine, closed)
            load_bins["live"] += len(closed)
            next_close += BIN_S
        for event in logs:
            pipeline.transport.publish(LOGS, event.node, codec.encode(event))
        for sample in samples:
            pipeline.transport.publish(TELEMETRY, sample.node, codec.encode(sample))
        pipeline.pump()
        if progress is not None and tick % max(ticks // 20, 1) == 0:
            progress((tick + 1) / ticks)
    if progress is not None:
        progress(1.0)
    report = _report(options, world, scheduler, repo, start_ts, time.perf_counter() - started)
    report.summary["load_bins"] = load_bins
    return report


@dataclass
class _World:
    """The ground truth as it plays out: precursors starting, failures landing (each crashes the job still on its
    node: Sentinel did not move it in time), as timeline events."""

    truth: list[TruthEvent]
    scheduler: SimScheduler
    start_ts: float
    events: list[TimelineEntry] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._precursors = sorted((e for e in self.truth if e.has_precursor), key=lambda e: e.precursor_start_s)
        self._failures = sorted(self.truth, key=lambda e: e.failure_s)

    def advance(self, t_s: float) -> None:
        while self._precursors and self._precursors[0].precursor_start_s <= t_s:
            event = self._precursors.pop(0)
            self.events.append(TimelineEntry(self.start_ts + event.precursor_start_s, event.node, "fault",
                                             f"{event.cls} precursor starts on {_where(event)}"))
        while self._failures and self._failures[0].failure_s <= t_s:
            event = self._failures.pop(0)
            ts = self.start_ts + event.failure_s
            if event.kind == "benign":
                text = f"benign {event.cls} on {_where(event)} (the job goes on)"
            else:
                text = f"{event.cls} failure on {_where(event)}: {SIGNATURE[FaultClass(event.cls)]}"
            self.events.append(TimelineEntry(ts, event.node, "fault", text))
            if event.needs_drain and (job := self.scheduler.crash_job_on(event.node)) is not None:
                self.crashed.append(job)
                self.events.append(TimelineEntry(ts, event.node, "job", f"job {job} crashed"))


def _where(event: TruthEvent) -> str:
    return f"GPU {event.gpu}" if event.gpu >= 0 else "the node"


def _load_history(options: DemoOptions, repo: Any, start_ts: float) -> dict[str, int]:
    """Simulated queue history for the days before the hour (the hour's own bins come from the scheduler)."""
    if options.load_history_days <= 0:
        return {"history": 0, "live": 0}
    first = start_ts - options.load_history_days * 86_400.0
    bins = [b for b in simulate_load(options.nodes * options.gpus, first, options.load_history_days, options.seed)
            if b.ts + BIN_S <= bin_start(start_ts)]
    record_load_bins(repo.engine, bins)
    return {"history": len(bins), "live": 0}


def _report(
    options: DemoOptions, world: _World, scheduler: SimScheduler, repo: Any, start_ts: float, wall_s: float
) -> DemoReport:
    findings = repo.table("findings")
    decisions = repo.table("decisions")
    results = repo.table("action_results")
    fatal = [e for e in world.truth if e.kind == "fault" and e.needs_drain]
    benign = [e for e in world.truth if e.kind == "benign"]
    fatal_nodes = {e.node for e in fatal}
    delays: list[float] = []
    by_kind: dict[str, list[float]] = {}
    for fault in fatal:
        onset = start_ts + fault.precursor_start_s
        hits = [f["ts"] for f in findings if f["node"] == fault.node and f["observed_ts"] >= onset
                and SEVERITY_RANK[Severity(f["severity"])] >= SEVERITY_RANK[Severity.CRITICAL]]
        if hits:
            delays.append(min(hits) - onset)
            by_kind.setdefault(fault.cls, []).append(min(hits) - onset)
    executed = [d for d in decisions if d["mode"] == "execute" and d["action"] in DISRUPTIVE]
    acted_nodes = {d["node"] for d in executed}
    drained = {n for n, s in scheduler.nodes.items() if (s.drain_reason or "").startswith(OWNED_REASON_PREFIX)}
    benign_nodes = {e.node for e in benign} - fatal_nodes
    warned = [e for e in fatal if e.has_precursor]
    lead_times = []  # how long before a warned fault's failure its node was drained (only drains that came first)
    for fault in warned:
        failure = start_ts + fault.failure_s
        drains = [r["ts"] for r in results
                  if r["node"] == fault.node and r["step"] == "drain" and r["status"] == "ok" and r["ts"] < failure]
        if drains:
            lead_times.append(failure - min(drains))
    summary = {
        "nodes": options.nodes,
        "gpus": options.nodes * options.gpus,
        "simulated_s": options.duration_s,
        "faults_injected": len(fatal),
        "faults_by_kind": {cls.value: sum(1 for e in fatal if e.cls == cls.value) for cls in DEMO_FAULTS},
        "benign_by_kind": {BenignClass.APP_XID.value: len(benign)},
        "fatal_faults_detected": len(delays),
        "nodes_drained": len(drained),
        "fatal_nodes_drained": len(drained & fatal_nodes),
        "benign_events": len(benign),
        "benign_actions": len([d for d in executed if d["node"] in benign_nodes]),
        "false_actions": len([d for d in executed if d["node"] not in fatal_nodes]),
        "mean_detection_delay_s": round(statistics.fmean(delays), 1) if delays else None,
        "detection_delay_s_by_kind": {k: round(statistics.fmean(v), 1) for k, v in sorted(by_kind.items())},
        "warned_faults": len(warned),
        "warned_drained_before_failure": len(lead_times),
        "lead_time_s": [round(x, 1) for x in lead_times],
        "jobs_crashed_by_faults": len(world.crashed),
        "jobs_checkpointed_before_drain": sum(1 for r in results if r["step"] == "checkpoint" and r["status"] == "ok"),
        "findings": len(findings),
        "decisions": len(decisions),
        "acted_nodes": len(acted_nodes),
        "wall_s": round(wall_s, 2),
        "store": f"sqlite:///{options.db_path}",
    }
    return DemoReport(summary, _timeline(world, findings, decisions, results), start_ts)


def _timeline(
    world: _World, findings: list[dict[str, Any]], decisions: list[dict[str, Any]], results: list[dict[str, Any]]
) -> list[TimelineEntry]:
    out = list(world.events)
    out += [TimelineEntry(f["ts"], f["node"], "finding", f"[{f['severity']}] {f['summary']}") for f in findings]
    out += [
        TimelineEntry(
            d["ts"],
            d["node"],
            "decision",
            f"{d['action']} -> {d['mode']}"
            + (f" (blocked by {', '.join(d['blocked_by'])})" if d["blocked_by"] else ""),
        )
        for d in decisions
    ]
    out += [TimelineEntry(r["ts"], r["node"], "action", f"{r['step']}: {r['status']} - {r['detail']}") for r in results]
    order = {"fault": 0, "job": 1, "finding": 2, "decision": 3, "action": 4}
    return sorted(out, key=lambda e: (e.ts, order[e.stage]))
