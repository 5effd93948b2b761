"""``sentinel-bench detect --scenario FILE``: Sentinel's detector and policy on a scenario's stream, scored
against its ground truth, side by side with a static-threshold baseline and a react-on-crash baseline.

Scoring (incident level). A fault that needs a drain is *caught* when an executed drain lands on its node between
its precursor start and ``GRACE_S`` after its failure, or when its node was already drained before the fault
began (nothing resumes nodes here, so that node had no job left to lose). Precision = caught / (caught + false
drains), where a false drain is one that matches no such fault (drains on benign, storm or software-fault nodes
included); recall = caught / faults that need a drain. Lead time = failure − first alert or drain on the node
inside the window (0 when the first comes after the failure); detection delay = first drain − failure, for faults
with no precursor. Rates are per 1,000 node-days of the scenario. Benign actions are false drains on a node within
``BENIGN_WINDOW_S`` after one of its benign or storm events (the drains those events caused).

Large scenarios can be scored on the nodes that have a ground-truth event plus a random share of the others
(``--healthy-sample``); node-days then count only the nodes fed, so false-drain rates stay per node-day.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sentinel import codec
from sentinel.actuator.steps import DryRunActuator
from sentinel.clock import ManualClock
from sentinel.config import AlertsConfig, HysteresisConfig, from_mapping
from sentinel.daemon import build_pipeline, open_repository
from sentinel.obs.metrics import Metrics
from sentinel.sim import groundtruth, scenario
from sentinel.sim.fleet import Fleet
from sentinel.sim.groundtruth import TruthEvent
from sentinel.sim.trainset import cached_model
from sentinel.tables import render
from sentinel.transport import LOGS, TELEMETRY
from sentinel_bench.baselines import ReactiveBaseline, Signal, ThresholdBaseline

GRACE_S = 300.0
BENIGN_WINDOW_S = 3600.0  # a false drain on a node within this long after its benign event is an action on it
FALSE_LIST_MAX = 50  # false alerts listed in the JSON (all are counted)
QUIET_S = HysteresisConfig().quiet_s  # an incident (a node episode) ends this long after its last finding
FLAP_HOLD_S = AlertsConfig().flap_hold_s


def episodes(signals: list[Signal], quiet_s: float = QUIET_S, hold_s: float = FLAP_HOLD_S) -> list[Signal]:
    """Signals as an operator is paged for them: one per node episode. An episode ends ``quiet_s`` after its last
    signal; a signal that comes within ``hold_s`` after an episode ended is held (not sent), as Sentinel holds a
    flapping alert. How the static baseline is counted beside Sentinel's graded alerts."""
    out: list[Signal] = []
    last: dict[str, float] = {}
    for sig in sorted(signals, key=lambda x: x.ts_s):
        prev = last.get(sig.node)
        if prev is None or sig.ts_s - prev > quiet_s + hold_s:
            out.append(Signal(sig.node, sig.ts_s, False, sig.why))
        last[sig.node] = sig.ts_s
    return out


def _off_window(alerts: list[Signal], faults: list[TruthEvent],
                slow: list[TruthEvent]) -> tuple[list[Signal], list[Signal]]:
    """Alerts outside every fault's window, split into (on a node whose fault already happened, the rest). A
    fail-slow GPU stays slow from its onset on: an alert on its node from then on is a true one."""
    failed: list[Signal] = []
    false: list[Signal] = []
    for s in alerts:
        if any(f.node == s.node and f.precursor_start_s <= s.ts_s <= f.failure_s + GRACE_S for f in faults) or \
                any(f.node == s.node and s.ts_s >= f.failure_s for f in slow):
            continue
        # A node whose fault already happened is out of service (nothing resumes it here): alerts on it are not
        # alerts on a healthy node, so they are counted apart.
        (failed if any(f.node == s.node and s.ts_s > f.failure_s for f in faults) else false).append(s)
    return failed, false


def score(signals: list[Signal], truth: list[TruthEvent], node_days: float,
          findings: list[Signal] | None = None) -> dict[str, Any]:
    """``signals``: drains and operator-facing alerts; ``findings``: the raw findings (or threshold crossings)
    behind the alerts (None: the alerts are the findings)."""
    faults = [e for e in truth if e.kind == "fault" and e.needs_drain]
    drains = sorted((s for s in signals if s.drain), key=lambda s: s.ts_s)
    alerts = [s for s in signals if not s.drain]
    by_node: dict[str, list[Signal]] = {}
    for s in signals:
        by_node.setdefault(s.node, []).append(s)
    used: set[int] = set()
    caught: dict[str, list[TruthEvent]] = {}
    leads: dict[str, list[float]] = {}
    precursor_leads: list[float] = []
    alert_leads: list[float] = []
    ahead = 0  # caught by a drain before the failure (the job checkpointed and moved in time)
    ahead_warned: dict[str, int] = {}  # per class: faults with a precursor drained before they failed
    delays: list[float] = []
    for fault in faults:
        window = [s for s in by_node.get(fault.node, [])
                  if fault.precursor_start_s <= s.ts_s <= fault.failure_s + GRACE_S]
        if fault.has_precursor:
            first_alert = min((s.ts_s for s in window if not s.drain), default=fault.failure_s)
            alert_leads.append(max(0.0, fault.failure_s - first_alert))
        used.update(i for i, d in enumerate(drains) if d.node == fault.node and
                    fault.precursor_start_s <= d.ts_s <= fault.failure_s + GRACE_S)
        drain = next((s for s in window if s.drain), None)
        earlier = any(d.node == fault.node and d.ts_s < fault.precursor_start_s for d in drains)
        if drain is None and not earlier:
            continue
        caught.setdefault(fault.cls, []).append(fault)
        in_time = earlier or (drain is not None and drain.ts_s < fault.failure_s)
        ahead += in_time
        if fault.has_precursor and in_time:
            ahead_warned[fault.cls] = ahead_warned.get(fault.cls, 0) + 1
        # Nothing resumes a node in this benchmark: a node drained before the fault began was already out of
        # service, so its job had moved before any sign of the fault (lead = the whole precursor).
        first = min((s.ts_s for s in window), default=fault.precursor_start_s) if not earlier else \
            fault.precursor_start_s
        leads.setdefault(fault.cls, []).append(max(0.0, fault.failure_s - first))
        if fault.has_precursor:
            precursor_leads.append(max(0.0, fault.failure_s - first))
        if not fault.has_precursor and drain is not None and not earlier:
            delays.append(max(0.0, drain.ts_s - fault.failure_s))
    slow = [e for e in truth if e.cls == "fail_slow"]
    # A drain of a node whose GPU runs slow (from its onset on) removes a straggler: not a false drain.
    used.update(i for e in slow for i, d in enumerate(drains) if d.node == e.node and d.ts_s >= e.failure_s)
    false = [d for i, d in enumerate(drains) if i not in used]
    failed, false_alerts = _off_window(alerts, faults, slow)
    _, false_findings = _off_window(alerts if findings is None else findings, faults, slow)
    benign = [e for e in truth if e.kind in ("benign", "storm")]
    tp, fp = sum(len(v) for v in caught.values()), len(false)
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / len(faults) if faults else None
    all_leads = [x for v in leads.values() for x in v]
    by_class = {}
    for cls in sorted({f.cls for f in faults}):
        total = sum(1 for f in faults if f.cls == cls)
        warned = sum(1 for f in faults if f.cls == cls and f.has_precursor)
        by_class[cls] = {"faults": total, "caught": len(caught.get(cls, [])),
                         "recall": round(len(caught.get(cls, [])) / total, 3),
                         "lead_time_median_s": _q(leads.get(cls, []), 0.5),
                         # of the class's faults with a precursor, the share drained before they failed
                         "with_precursor": warned,
                         "ahead_share": round(ahead_warned.get(cls, 0) / warned, 3) if warned else None}
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else 0.0
    split = {}
    for label, warned in (("with_precursor", True), ("no_precursor", False)):
        group = [f for f in faults if f.has_precursor is warned]
        hit = sum(1 for v in caught.values() for f in v if f.has_precursor is warned)
        split[label] = {"faults": len(group), "caught": hit, "recall": round(hit / len(group), 3) if group else None}

    def rate(n: int) -> float | None:
        return round(n * 1000 / node_days, 2) if node_days else None

    return {
        "faults": len(faults), "caught": tp, "drained_before_failure": ahead, "drains": len(drains),
        "false_drains": fp,
        "precision": _r(precision), "recall": _r(recall), "f1": round(f1, 3),
        "lead_time_median_s": _q(all_leads, 0.5), "lead_time_p10_s": _q(all_leads, 0.1),
        "lead_time_precursor_median_s": _q(precursor_leads, 0.5),
        "alert_lead_precursor_median_s": _q(alert_leads, 0.5),
        "detection_delay_median_s": _q(delays, 0.5),
        "false_drains_per_1000_node_days": rate(fp),
        "false_alerts_per_1000_node_days": rate(len(false_alerts)),
        "false_findings_per_1000_node_days": rate(len(false_findings)),
        "alerts_per_1000_node_days": rate(len(alerts)),
        "false_alerts_by_rule": dict(Counter(s.why for s in false_alerts).most_common()),
        "false_findings_by_rule": dict(Counter(s.why for s in false_findings).most_common()),
        "false_alert_list": [{"node": s.node, "t_s": round(s.ts_s, 1), "why": s.why[:160]}
                             for s in false_alerts[:FALSE_LIST_MAX]],
        "findings_after_failure": len(failed),
        "false_drain_list": [{"node": d.node, "t_s": round(d.ts_s, 1), "why": d.why[:160]} for d in false],
        "benign_actions": sum(1 for d in false if any(
            e.node == d.node and e.failure_s <= d.ts_s <= e.failure_s + BENIGN_WINDOW_S for e in benign)),
        "by_class": by_class,
        **split,
    }


def score_baseline(signals: list[Signal], truth: list[TruthEvent], node_days: float) -> dict[str, Any]:
    """A baseline scored as its tools page: every threshold crossing (drains included) is an alert, one per node
    episode (``episodes``); its drains are scored as they are."""
    drains = [s for s in signals if s.drain]
    return score(drains + episodes(signals), truth, node_days, findings=[s for s in signals if not s.drain])


STRAGGLER_GOAL_S = 20.0
STRAGGLER_REMOVED_S = 600.0  # issue 36: a confirmed straggler removed within 10 min of its onset
EVENT_LOOKBACK_S = 7200.0


class _Feed:
    """Which nodes get telemetry at each step: the fed nodes always, event nodes inside their event windows."""

    def __init__(self, always: list[int], events: list[TruthEvent], index: dict[str, int], step_s: float) -> None:
        self.always = always
        self.step_s = step_s
        self.node = np.array([index[e.node] for e in events], dtype=np.int64)
        self.start = np.array([e.precursor_start_s - EVENT_LOOKBACK_S for e in events])
        # a fail-slow GPU stays slow: fed long enough for a straggler to be confirmed and removed
        self.end = np.array([e.failure_s + (STRAGGLER_REMOVED_S if e.cls == "fail_slow" else GRACE_S)
                             for e in events])
        self.node_steps = 0

    def nodes(self, t_s: float) -> list[int]:
        active = self.node[(self.start <= t_s) & (self.end >= t_s)] if len(self.node) else self.node
        chosen = sorted(set(self.always).union(active.tolist())) if len(active) else self.always
        self.node_steps += len(chosen)
        return chosen


def straggler_score(findings: list[dict[str, Any]], truth: list[TruthEvent], start: float, step_s: float,
                    alerts: list[Signal] | None = None, node_days: float = 0.0,
                    drains: list[Signal] | None = None) -> dict[str, Any]:
    """Fail-slow faults found by a straggler finding on their GPU, and how soon: within STRAGGLER_GOAL_S of onset
    (``share_within_20s``) and within max(STRAGGLER_GOAL_S, two sampling intervals) (``share_within_2_steps``);
    straggler findings and operator-facing alerts graded on one (``alerts``) on GPUs or nodes with no such fault;
    fail-slow faults whose node was drained within STRAGGLER_REMOVED_S of onset (``removed_within_600s_share``)."""
    slow = [e for e in truth if e.cls == "fail_slow"]
    removed = sum(1 for e in slow if any(d.node == e.node and 0 <= d.ts_s - e.failure_s <= STRAGGLER_REMOVED_S
                                         for d in drains or []))
    delays = []
    for e in slow:
        hits = [f["observed_ts"] - start - e.failure_s for f in findings
                if f["kind"] == "straggler" and f["node"] == e.node and f["gpu_index"] == e.gpu
                and f["observed_ts"] - start >= e.failure_s]
        if hits:
            delays.append(min(hits))
    within = sum(1 for d in delays if d <= STRAGGLER_GOAL_S)
    two_steps = sum(1 for d in delays if d <= max(STRAGGLER_GOAL_S, 2 * step_s))
    false_alerts = [a for a in alerts or [] if "straggler-clock" in a.why
                    and not any(a.node == e.node for e in slow)]
    return {"faults": len(slow), "found": len(delays), "found_within_20s": within,
            "share_within_20s": round(within / len(slow), 3) if slow else None,
            "found_within_2_steps": two_steps,
            "share_within_2_steps": round(two_steps / len(slow), 3) if slow else None,
            "delay_median_s": _q(delays, 0.5),
            "false_findings": sum(1 for f in findings if f["kind"] == "straggler" and not any(
                f["node"] == e.node and f["gpu_index"] == e.gpu for e in slow)),
            "false_alerts": len(false_alerts),
            "removed_within_600s": removed,
            "removed_within_600s_share": round(removed / len(slow), 3) if slow else None,
            "false_alerts_per_1000_node_days": round(len(false_alerts) * 1000 / node_days, 2) if node_days else None}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _q(values: list[float], q: float) -> float | None:
    return round(float(np.quantile(values, q)), 1) if values else None


@dataclass
class Replay:
    """What each system did on a scenario's stream: Sentinel's decisions and findings, the baselines' signals."""

    sc: scenario.Scenario
    truth: list[TruthEvent]
    index: dict[str, int]
    ours: list[Signal]  # drains and operator-facing alerts
    raw: list[Signal]  # the findings behind the alerts (warning and up)
    baselines: dict[str, list[Signal]]
    findings: list[dict[str, Any]]
    start_ts: float
    fed: list[int]  # nodes fed the whole run
    event_nodes: set[int]
    node_steps: int
    steps: int
    breaker_open: bool
    model: dict[str, Any] | None

    @property
    def node_days(self) -> float:
        return self.node_steps * self.sc.step_s / 86_400.0


def replay(sc: scenario.Scenario, fed: list[int], event_windows: bool, max_steps: int | None = None,
           max_fraction: float = 0.1, model: str | None = None,
           progress: Callable[[float], None] | None = None, first_step: int = 0) -> Replay:
    """Run Sentinel's real pipeline (act mode, dry-run actuator, product defaults otherwise) and the baselines on
    the scenario's stream, feeding ``fed`` nodes the whole run and, with ``event_windows``, each node that has a
    ground-truth event around it (see ``run_detect``).

    ``first_step`` > 0 replays only the steps from there to ``max_steps`` (one part of a run split across
    processes): the fleet is simulated from the start, the pipeline is fed from ``EVENT_LOOKBACK_S`` before
    ``first_step`` to warm its windows, and only what it does from ``first_step`` on is kept and counted."""
    model_path = cached_model(lambda text: print(f"bench: {text}", file=sys.stderr)) if model is None else model
    truth = groundtruth.plan(sc)
    fleet = Fleet(sc, truth)
    event_nodes = {fleet.index[e.node] for e in truth}
    feed = _Feed(fed, truth if event_windows else [], fleet.index, sc.step_s)
    steps = int(sc.duration_s / sc.step_s) if max_steps is None else min(max_steps, int(sc.duration_s / sc.step_s))
    with tempfile.TemporaryDirectory() as tmp:
        config = from_mapping({"store": {"url": f"sqlite:///{tmp}/detect.db"},
                               "policy": {"mode": "act", "breaker": {"max_fraction": max_fraction}},
                               "detector": {"record_interval_s": 300, "hazard": {"model": model_path},
                                            "host_anomaly": {"state_dir": f"{tmp}/host"}}})
        clock = ManualClock(fleet.start_ts)
        pipeline = build_pipeline(config, clock, Metrics(), open_repository(config, migrate=True),
                                  actuator=DryRunActuator(clock))
        baselines: dict[str, ThresholdBaseline | ReactiveBaseline] = {"threshold": ThresholdBaseline(),
                                                                      "reactive": ReactiveBaseline()}
        seen: dict[str, list[Signal]] = {name: [] for name in baselines}
        warm_from = max(0, first_step - int(EVENT_LOOKBACK_S / sc.step_s)) if first_step else 0
        kept_from_s = first_step * sc.step_s
        for k in range(steps):
            step = fleet.step()
            clock.advance(sc.step_s)
            if k < warm_from:
                continue
            if k == first_step:
                counted = feed.node_steps
                seen = {name: [] for name in baselines}
            logs = fleet.logs(step)
            samples = fleet.samples(step, feed.nodes(step.t_s))
            for event in logs:
                pipeline.transport.publish(LOGS, event.node, codec.encode(event))
            for s in samples:
                pipeline.transport.publish(TELEMETRY, s.node, codec.encode(s))
            pipeline.pump()
            for b_name, baseline in baselines.items():
                for s in samples:
                    seen[b_name] += baseline.sample(s, step.t_s)
                for event in logs:
                    seen[b_name] += baseline.log(event, step.t_s)
            if progress is not None and k % max(steps // 100, 1) == 0:
                progress(k / steps)
        start = fleet.start_ts
        ours = [Signal(d["node"], d["ts"] - start, True, d["reason"], d["action"] == "checkpoint_drain_requeue")
                for d in pipeline.repo.table("decisions")
                if d["mode"] == "execute" and d["action"] in ("drain_requeue", "checkpoint_drain_requeue")
                and d["ts"] - start >= kept_from_s]
        findings = [f for f in pipeline.repo.table("findings") if f["ts"] - start >= kept_from_s]
        raw = [Signal(f["node"], f["ts"] - start, False, f["rule"]) for f in findings
               if f["severity"] in ("warning", "critical", "fatal")]
        ours += [Signal(i["node"], i["alert_ts"] - start, False, i["alert_reason"].split(" | ")[0])
                 for i in pipeline.repo.table("incidents", order_by="opened_ts")
                 if i["alert_ts"] is not None and not i["alert_held"] and i["alert_ts"] - start >= kept_from_s]
        breaker = pipeline.repo.load_breaker()
        scorer = pipeline.detector.hazard
        model_info = {"name": scorer.name, "rows_scored": scorer.rows_scored,
                      "threshold": round(scorer.threshold, 4),
                      "fit_s": scorer.model.report.get("fit_s"),
                      "scoring_rows_per_s": round(scorer.rows_scored / scorer.score_s) if scorer.score_s else None,
                      "validation": scorer.model.report.get("validation")} if scorer else None
    return Replay(sc, truth, fleet.index, ours, raw, seen, findings, start, fed, event_nodes, feed.node_steps - counted,
                  steps, bool(breaker and breaker.is_open), model_info)


def run_detect(name: str, healthy_sample: float = 1.0, progress: Callable[[float], None] | None = None,
               max_steps: int | None = None, max_fraction: float = 0.1, model: str | None = None,
               event_windows: bool = False, background: bool = True) -> dict[str, Any]:
    """Score the scenario; the policy runs with its defaults (act mode, dry-run actuator) and the breaker at
    ``max_fraction`` of the fleet per hour, so a storm shows what the breaker holds back.

    ``model``: a hazard model directory, ``""`` for rules only, or None for the model trained on the shipped
    training scenario (trained on first use and cached).

    ``event_windows``: feed a node that has a ground-truth event only from ``EVENT_LOOKBACK_S`` before its
    precursor starts to ``GRACE_S`` after it fails (instead of the whole run), so fleets of thousands of nodes over
    weeks can be scored; healthy-sampled nodes are still fed the whole run, and node-days count what was fed.

    ``background``: False scores the same scenario on a clean fleet (its ``[background]`` switched off)."""
    sc = scenario.load(name)
    if not background:
        sc = sc.clean()
    event_nodes = {groundtruth.node_index(e.node) for e in groundtruth.plan(sc)}
    rng = np.random.default_rng(sc.seed + 2)
    whole_run = set() if event_windows else event_nodes
    fed = sorted(i for i in range(sc.nodes) if i in whole_run or rng.random() < healthy_sample)
    r = replay(sc, fed, event_windows, max_steps, max_fraction, model, progress)
    result = score(r.ours, r.truth, r.node_days, findings=r.raw)
    result["stragglers"] = straggler_score(r.findings, r.truth, r.start_ts, sc.step_s,
                                           [x for x in r.ours if not x.drain], r.node_days,
                                           [x for x in r.ours if x.drain])
    result["model"] = r.model
    nodes_fed = len(set(fed) | event_nodes) if event_windows else len(fed)
    result.update({"scenario": sc.name, "background": background, "max_fraction": max_fraction,
                   "nodes_fed": nodes_fed,
                   "event_windows": event_windows,
                   "node_days": round(r.node_days, 2), "steps": r.steps,
                   "breaker_open": r.breaker_open,
                   "baselines": {b: score_baseline(s, r.truth, r.node_days) for b, s in r.baselines.items()}})
    return result


def render_detect(r: dict[str, Any]) -> str:
    keys = ["precision", "recall", "f1", "lead_time_median_s", "lead_time_p10_s", "lead_time_precursor_median_s",
            "alert_lead_precursor_median_s", "detection_delay_median_s",
            "false_drains_per_1000_node_days", "false_alerts_per_1000_node_days", "false_findings_per_1000_node_days",
            "alerts_per_1000_node_days", "benign_actions"]
    rows = [{"metric": k, "sentinel": r[k], "threshold": r["baselines"]["threshold"][k],
             "reactive": r["baselines"]["reactive"][k]} for k in keys]
    for split in ("with_precursor", "no_precursor"):
        label = "with a precursor" if split == "with_precursor" else "without one"
        rows.append({"metric": f"recall, faults {label}", "sentinel": r[split]["recall"],
                     "threshold": r["baselines"]["threshold"][split]["recall"],
                     "reactive": r["baselines"]["reactive"][split]["recall"]})
    classes = [{"class": c, **v} for c, v in r["by_class"].items()]
    st = r["stragglers"]
    model = r["model"]
    tail = (f"\n\nStragglers (fail-slow GPUs): {st['found_within_20s']}/{st['faults']} found within 20 s of onset, "
            f"{st['found_within_2_steps']} within max(20 s, two samples) (median delay {st['delay_median_s']} s), "
            f"{st['removed_within_600s']} removed (drained) within 10 min; "
            f"{st['false_findings']} straggler findings and {st['false_alerts']} straggler alerts elsewhere"
            + (f"\nHazard model {model['name']}: threshold {model['threshold']}, fitted in {model['fit_s']} s; "
               f"{model['rows_scored']} GPU rows scored at {model['scoring_rows_per_s']} rows/s (features + model)"
               if model else "\nRules only (no hazard model)"))
    world = "realistic" if r["background"] else "clean"
    return (f"{r['scenario']} ({world} background): {r['nodes_fed']} nodes fed, {r['node_days']} node-days, "
            f"{r['faults']} faults that need a drain; breaker open at the end: {r['breaker_open']}\n"
            + render(rows, [("metric", "metric"), ("sentinel", "sentinel"), ("threshold", "static thresholds"),
                            ("reactive", "react on crash")])
            + "\n\nSentinel by class:\n"
            + render(classes, [("class", "class"), ("faults", "faults"), ("caught", "caught"), ("recall", "recall"),
                               ("lead_time_median_s", "median lead s")])
            + tail)



