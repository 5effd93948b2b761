"""``sentinel-bench goodput --scenario FILE``: the training time each system saves, as ETTR, on the same failures.

1. Sentinel's real pipeline (act mode, product defaults, dry-run actuator) and the static-threshold baseline watch
   the scenario's stream (``bench detect``'s replay: every node with a ground-truth event inside its event window,
   plus ``healthy_nodes`` event-free nodes for the whole run).
2. Each system's actions become stops on the scenario's jobs (``sentinel.capacity.goodput.timeline``): the jobs are the
   scenario's full job groups (``job_nodes`` each) that its ``busy_fraction`` of the fleet holds, the nodes left
   over and ``[goodput] spare_nodes`` form the spare pool. Faults interrupt a job unless the system drained the
   node first (in the fault's window: from its precursor to its failure); a drain that asked for a checkpoint
   loses no compute when the write fits before the failure; a drain after the failure only cuts the hang short;
   every other drain is a false drain. False drains seen on the healthy nodes fed are scaled to the node-time
   nobody fed (placed at random times on random nodes).
3. Systems: ``reactive`` (periodic checkpoints only, a failure is noticed at the collective timeout, a slow GPU
   after ``slow_noticed_s``), ``threshold`` (drains at the thresholds existing tools ship, no checkpoint request,
   no straggler detection), ``sentinel``, ``oracle`` (drains each fault with a precursor at its onset with a
   checkpoint, notices every other hardware failure at once, removes a slow GPU at onset, never drains a healthy
   node). Software faults cost every system the same.
4. For each system: ETTR at the common interval and at the interval that maximises it (searched), lost GPU-hours by
   cause, and Kokolis et al.'s analytic ETTR at the same parameters as a cross-check.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import numpy as np

from sentinel.capacity.goodput import analytic
from sentinel.capacity.goodput.params import Goodput
from sentinel.capacity.goodput.timeline import CAUSES, Costs, Kind, Result, Stop, simulate
from sentinel.sim import groundtruth, scenario
from sentinel.sim.groundtruth import TruthEvent
from sentinel.sim.trainset import cached_model
from sentinel.tables import render
from sentinel_bench.baselines import Signal
from sentinel_bench.detect import FALSE_LIST_MAX, GRACE_S, Replay, replay

SYSTEMS = ("reactive", "threshold", "sentinel", "oracle")
SEARCH_POINTS = 48  # log-spaced intervals between the bounds below
SEARCH_MIN_S, SEARCH_MAX_S = 120.0, 86_400.0


def job_layout(sc: scenario.Scenario, spares: int) -> tuple[list[list[int]], list[int]]:
    """The scenario's jobs: as many full job groups (``job_nodes`` each) as its ``busy_fraction`` of the fleet
    holds (at least one); the spare pool: the nodes left over plus ``spares`` unsimulated ones."""
    full = max(1, math.floor(sc.nodes * sc.busy_fraction / sc.job_nodes + 1e-9))
    jobs = [list(range(j * sc.job_nodes, (j + 1) * sc.job_nodes)) for j in range(full)]
    return jobs, list(range(full * sc.job_nodes, sc.nodes + spares))


def _first_drains(signals: list[Signal]) -> dict[int, list[Signal]]:
    by_node: dict[int, list[Signal]] = {}
    for s in sorted((s for s in signals if s.drain), key=lambda s: s.ts_s):
        by_node.setdefault(groundtruth.node_index(s.node), []).append(s)
    return by_node


def stops_for(system: str, truth: list[TruthEvent], p: Goodput, drains: dict[int, list[Signal]] | None = None,
              slow_found: dict[tuple[int, int], float] | None = None) -> tuple[list[Stop], list[Signal]]:
    """The stops a system causes on the scenario's faults; with ``drains`` (the system's drains by node), also the
    false ones. Returns the stops and the false drains (to be scaled to the unfed node-time)."""
    drains = drains or {}
    used: set[int] = set()
    stops: list[Stop] = []
    for f in (e for e in truth if e.kind == "fault"):
        node = groundtruth.node_index(f.node)
        if f.cls == "software":
            stops.append(Stop(f.failure_s, node, Kind.CRASH, hang_s=p.hang_detect_s))
            continue
        if f.cls == "fail_slow":
            stops.append(Stop(f.failure_s, node, Kind.SLOW))
            found = f.failure_s if system == "oracle" else (slow_found or {}).get((node, f.gpu))
            removed = found + (0.0 if system == "oracle" else p.alert_response_s) if found is not None else math.inf
            for s in drains.get(node, []):  # the system drained the slow node itself: no one has to act
                if s.ts_s >= f.failure_s:
                    used.add(id(s))
                    removed = min(removed, s.ts_s)
            removed = min(removed, f.failure_s + p.slow_noticed_s)
            stops.append(Stop(removed, node, Kind.DRAIN, checkpoint=True, repair_s=p.repair_s))
            continue
        if not f.needs_drain:  # a contained error (Xid 94, no precursor): the job restarts, the node stays
            stops.append(Stop(f.failure_s, node, Kind.CRASH, hang_s=0.0 if system == "oracle" else p.hang_detect_s))
            continue
        if system == "oracle":
            if f.has_precursor and f.precursor_start_s + p.checkpoint_write_s <= f.failure_s:
                stops.append(Stop(f.precursor_start_s, node, Kind.DRAIN, checkpoint=True, repair_s=p.repair_s))
            else:
                stops.append(Stop(f.failure_s, node, Kind.FAIL, hang_s=0.0, repair_s=p.repair_s))
            continue
        hang = p.hang_detect_s
        ahead = None
        for s in drains.get(node, []):
            if f.precursor_start_s <= s.ts_s <= f.failure_s + GRACE_S:
                used.add(id(s))
            if f.precursor_start_s <= s.ts_s < f.failure_s and ahead is None:
                ahead = s
            elif f.failure_s <= s.ts_s <= f.failure_s + p.hang_detect_s:
                hang = min(hang, s.ts_s - f.failure_s)
        write = p.checkpoint_write_s if ahead is not None and ahead.checkpoint else 0.0
        if ahead is not None and ahead.ts_s + write <= f.failure_s:
            stops.append(Stop(ahead.ts_s, node, Kind.DRAIN, checkpoint=ahead.checkpoint, repair_s=p.repair_s))
        else:
            stops.append(Stop(f.failure_s, node, Kind.FAIL, hang_s=hang, repair_s=p.repair_s))
    # The simulator never repairs a node: after a fault has failed, its node keeps the failure's state (a lost GPU,
    # a downed link) in the telemetry, while the timeline sends it to repair and back. A drain on it after that
    # failure acts on the aftermath (a detector that restarted, as each part of a split replay does, sees the lost
    # GPU anew), not on a healthy node: it is neither a catch nor a false drain.
    failed_at: dict[int, float] = {}
    for f in truth:
        if f.kind == "fault" and f.needs_drain:
            node = groundtruth.node_index(f.node)
            failed_at[node] = min(failed_at.get(node, math.inf), f.failure_s)
    false = [s for node, signals in drains.items() for s in signals
             if id(s) not in used and s.ts_s < failed_at.get(node, math.inf)]
    stops += [Stop(s.ts_s, groundtruth.node_index(s.node), Kind.DRAIN, checkpoint=s.checkpoint,
                   repair_s=p.false_drain_return_s, false=True) for s in false]
    return stops, false


def _scaled_false(false: list[Signal], r: Replay, p: Goodput, seed: int) -> tuple[list[Stop], float]:
    """False drains seen on the healthy nodes fed, extended to the node-time nobody fed: a Poisson count at the
    observed rate per healthy node-day, at uniform times on uniform nodes. Returns them and the scale factor."""
    healthy = set(r.fed) - r.event_nodes
    if not healthy:
        return [], 1.0
    on_healthy = sum(1 for s in false if groundtruth.node_index(s.node) in healthy)
    sampled_days = len(healthy) * r.steps * r.sc.step_s / 86_400.0
    unfed_days = max(0.0, r.sc.nodes * r.steps * r.sc.step_s / 86_400.0 - r.node_days)
    rng = np.random.default_rng(seed)
    count = int(rng.poisson(on_healthy / sampled_days * unfed_days)) if on_healthy else 0
    share = [s for s in false if groundtruth.node_index(s.node) in healthy]
    asks = [s.checkpoint for s in share] or [False]
    extra = [Stop(float(rng.uniform(0, r.steps * r.sc.step_s)), int(rng.integers(r.sc.nodes)), Kind.DRAIN,
                  checkpoint=bool(asks[int(rng.integers(len(asks)))]), repair_s=p.false_drain_return_s, false=True)
             for _ in range(count)]
    return extra, (sampled_days + unfed_days) / sampled_days


def _run(stops: list[Stop], jobs: list[list[int]], pool: list[int], sc: scenario.Scenario, p: Goodput,
         interval_s: float, duration_s: float) -> Result:
    costs = Costs(interval_s, p.checkpoint_write_s, p.restart_s, p.fail_slow_speed)
    return simulate(jobs, pool, sc.gpus_per_node, costs, duration_s, stops)


def _summary(res: Result, reactive: Result | None) -> dict[str, Any]:
    hours = {k: round(v / 3600.0, 1) for k, v in res.lost_gpu_s.items()}
    hours["total"] = round(sum(res.lost_gpu_s.values()) / 3600.0, 1)
    return {"ettr": round(res.ettr, 5), "lost_gpu_hours": hours, "interruptions": res.interruptions,
            "interruptions_avoided": (reactive.interruptions - res.interruptions) if reactive else 0,
            "planned_stops": res.planned_stops, "false_drains": res.false_drains,
            "false_drain_cost_pp": round(100.0 * res.lost_gpu_s["false_drains"] / res.wall_gpu_s, 4)
            if res.wall_gpu_s else 0.0}


def _search(stops: list[Stop], jobs: list[list[int]], pool: list[int], sc: scenario.Scenario, p: Goodput,
            duration_s: float) -> tuple[float, Result]:
    low = max(SEARCH_MIN_S, 2.0 * p.checkpoint_write_s)
    grid = np.geomspace(low, max(SEARCH_MAX_S, low * 2), SEARCH_POINTS)
    best = max(((float(i), _run(stops, jobs, pool, sc, p, float(i), duration_s)) for i in grid),
               key=lambda pair: pair[1].ettr)
    return best


def _analytic(res: Result, stops: list[Stop], sc: scenario.Scenario, p: Goodput, interval_s: float,
              duration_s: float) -> float | None:
    """Kokolis et al.'s E[ETTR] with this system's rate of unexpected stops per node and mean hang."""
    unexpected = [s for s in stops if s.kind in (Kind.FAIL, Kind.CRASH)]
    if not unexpected:
        return None
    rate = len(unexpected) / (sc.nodes * duration_s)
    hang = float(np.mean([s.hang_s for s in unexpected]))
    return round(analytic.kokolis_ettr(sc.job_nodes, rate, hang + p.restart_s, interval_s, p.checkpoint_write_s), 5)


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _replay_part(sc: scenario.Scenario, fed: list[int], first: int, last: int, model: str, part: str) -> Replay:
    shown = [-1]
    started = time.perf_counter()

    def progress(fraction: float) -> None:
        done = (fraction * last - first) / max(last - first, 1)
        if int(done * 10) > shown[0]:  # every 10 % of this part
            shown[0] = int(done * 10)
            print(f"goodput: detection replay, part {part}: {max(done, 0.0):4.0%} "
                  f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    return replay(sc, fed, True, last, model=model, progress=progress, first_step=first)


def _parallel_replay(sc: scenario.Scenario, fed: list[int], steps: int, model: str, workers: int,
                     say: Callable[[str], None]) -> Replay:
    """The replay split into ``workers`` consecutive parts of the run, one process each (each part warms its
    pipeline on the ``EVENT_LOOKBACK_S`` before it: ``replay(first_step=...)``), merged back into one."""
    bounds = np.linspace(0, steps, workers + 1).astype(int)
    parts = [(int(a), int(b)) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    say(f"detection replay in {len(parts)} part(s), one process each")
    if len(parts) == 1:
        return _replay_part(sc, fed, 0, steps, model, "1/1")
    with ProcessPoolExecutor(len(parts), mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(_replay_part, sc, fed, a, b, model, f"{i + 1}/{len(parts)}")
                   for i, (a, b) in enumerate(parts)]
        done = [f.result() for f in futures]
    first = done[0]
    return Replay(sc, first.truth, first.index, [x for r in done for x in r.ours], [x for r in done for x in r.raw],
                  {name: [x for r in done for x in r.baselines[name]] for name in first.baselines},
                  [x for r in done for x in r.findings], first.start_ts, fed, first.event_nodes,
                  sum(r.node_steps for r in done), steps, any(r.breaker_open for r in done), first.model)


def run_goodput(name: str, overrides: dict[str, float | int | None] | None = None, healthy_nodes: int = 16,
                max_steps: int | None = None, model: str | None = None, background: bool = True,
                progress: Callable[[str], None] | None = None, workers: int | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    say = progress or (lambda text: None)
    sc = scenario.load(name)
    if not background:
        sc = sc.clean()
    p = sc.goodput.with_overrides(overrides or {})
    steps = int(sc.duration_s / sc.step_s) if max_steps is None else min(max_steps, int(sc.duration_s / sc.step_s))
    duration = steps * sc.step_s
    truth = [e for e in groundtruth.plan(sc) if e.precursor_start_s < duration]
    event_nodes = {groundtruth.node_index(e.node) for e in truth}
    rng = np.random.default_rng(sc.seed + 3)
    candidates = [i for i in range(sc.nodes) if i not in event_nodes]
    fed = sorted(int(i) for i in rng.choice(candidates, size=min(healthy_nodes, len(candidates)), replace=False)) \
        if candidates else []
    say(f"replaying {sc.name}: {steps} steps, {len(event_nodes)} nodes with events (fed around them), "
        f"{len(fed)} healthy nodes fed the whole run")
    if model is None:
        model = str(cached_model(lambda text: say(text)))
    r = _parallel_replay(sc, fed, steps, model, workers or default_workers(), say)
    jobs, pool = job_layout(sc, p.spare_nodes)
    slow_found: dict[tuple[int, int], float] = {}
    for f in r.findings:
        if f["kind"] == "straggler" and f["gpu_index"] is not None:
            key = (groundtruth.node_index(f["node"]), int(f["gpu_index"]))
            slow_found[key] = min(slow_found.get(key, math.inf), f["observed_ts"] - r.start_ts)
    plans: dict[str, list[Stop]] = {}
    seen_false: dict[str, list[Signal]] = {}  # the false drains seen on the nodes fed, before scaling
    scale: dict[str, float] = {}
    for system in SYSTEMS:
        signals = {"sentinel": r.ours, "threshold": r.baselines["threshold"]}.get(system)
        stops, false = stops_for(system, truth, p, _first_drains(signals) if signals else None,
                                 slow_found if system == "sentinel" else None)
        extra, factor = _scaled_false(false, r, p, sc.seed + SYSTEMS.index(system))
        plans[system], scale[system] = stops + extra, factor
        seen_false[system] = false
    say("simulating the jobs and searching each system's best checkpoint interval")
    common = {s: _run(plans[s], jobs, pool, sc, p, p.checkpoint_interval_s, duration) for s in SYSTEMS}
    systems: dict[str, Any] = {}
    for s in SYSTEMS:
        best_interval, best = _search(plans[s], jobs, pool, sc, p, duration)
        systems[s] = _summary(common[s], common["reactive"]) | {
            "best_interval_s": round(best_interval, 1), "ettr_at_best_interval": round(best.ettr, 5),
            "lost_gpu_hours_at_best_interval": _summary(best, None)["lost_gpu_hours"],
            "analytic_ettr": _analytic(common[s], plans[s], sc, p, p.checkpoint_interval_s, duration),
            "false_drain_scale": round(scale[s], 2),
            "false_drains_seen": len(seen_false[s]),
            "false_drain_list": [{"node": d.node, "t_s": round(d.ts_s, 1), "why": d.why[:160]}
                                 for d in seen_false[s][:FALSE_LIST_MAX]]}
    gap = {}
    for label, field in (("common_interval", "ettr"), ("best_interval", "ettr_at_best_interval")):
        span = systems["oracle"][field] - systems["reactive"][field]
        gap[label] = round((systems["sentinel"][field] - systems["reactive"][field]) / span, 3) if span > 0 else None
    # What holds Sentinel back: its lost GPU-hours minus the oracle's, by cause (positive = Sentinel loses more).
    holds_back = {c: round(systems["sentinel"]["lost_gpu_hours"][c] - systems["oracle"]["lost_gpu_hours"][c], 1)
                  for c in CAUSES}
    mtbf = duration * sc.nodes / max(1, sum(1 for e in truth if e.kind == "fault" and e.cls != "fail_slow")) / \
        sc.job_nodes
    return {
        "scenario": sc.name, "background": background, "duration_s": duration, "step_s": sc.step_s,
        "jobs": len(jobs), "job_nodes": sc.job_nodes, "job_gpus": sc.job_nodes * sc.gpus_per_node,
        "spare_pool": len(pool), "params": {k: getattr(p, k) for k in p.__struct_fields__},
        "faults": dict(sorted(_count(truth).items())),
        "job_mtbf_s": round(mtbf, 1),
        "young_interval_s": round(analytic.young_interval_s(p.checkpoint_write_s, mtbf), 1),
        "systems": systems, "sentinel_gap_closed": gap, "sentinel_minus_oracle_gpu_hours": holds_back,
        "replay": {"nodes_with_events": len(event_nodes), "healthy_nodes_fed": len(fed), "steps": r.steps,
                   "processes": workers or default_workers(),
                   "node_days_fed": round(r.node_days, 1), "breaker_open": r.breaker_open,
                   "note": "nodes with a ground-truth event are fed around it only; false drains seen on the "
                           "healthy nodes fed are scaled to the node-time nobody fed (false_drain_scale); the run "
                           "is replayed in consecutive parts, one process each, each warmed up for 2 h"},
        "elapsed_s": round(time.perf_counter() - started, 1),
    }


def _count(truth: list[TruthEvent]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in truth:
        if e.kind == "fault":
            out[e.cls] = out.get(e.cls, 0) + 1
    return out


def render_goodput(r: dict[str, Any]) -> str:
    p = r["params"]
    rows = []
    for name in SYSTEMS:
        s = r["systems"][name]
        rows.append({"system": name, "ettr": f"{100 * s['ettr']:.2f} %",
                     "best": f"{100 * s['ettr_at_best_interval']:.2f} % at {s['best_interval_s'] / 60:.0f} min",
                     "analytic": f"{100 * s['analytic_ettr']:.2f} %" if s["analytic_ettr"] is not None else "-",
                     "lost": s["lost_gpu_hours"]["total"], "interruptions": s["interruptions"],
                     "avoided": s["interruptions_avoided"], "false": s["false_drains"]})
    causes = [{"cause": c, **{n: r["systems"][n]["lost_gpu_hours"][c] for n in SYSTEMS}} for c in CAUSES]
    gap = r["sentinel_gap_closed"]
    return (f"{r['scenario']}: {r['jobs']} job(s) of {r['job_gpus']} GPUs, {r['spare_pool']} spare nodes, "
            f"{r['duration_s'] / 86400:.1f} days; faults {r['faults']}\n"
            f"checkpoint every {p['checkpoint_interval_s'] / 60:g} min (write {p['checkpoint_write_s']:g} s), "
            f"restart {p['restart_s']:g} s, hang noticed after {p['hang_detect_s']:g} s; "
            f"job MTBF {r['job_mtbf_s'] / 3600:.2f} h (Young's interval {r['young_interval_s'] / 60:.1f} min)\n"
            + render(rows, [("system", "system"), ("ettr", "ETTR"), ("best", "ETTR at its best interval"),
                            ("analytic", "Kokolis analytic"), ("lost", "lost GPU-h"),
                            ("interruptions", "interruptions"), ("avoided", "avoided"), ("false", "false drains")])
            + "\n\nLost GPU-hours by cause (common interval):\n"
            + render(causes, [("cause", "cause"), *[(n, n) for n in SYSTEMS]])
            + f"\n\nSentinel closes {_share(gap['common_interval'])} of the reactive-to-oracle ETTR gap at the "
              f"common interval, {_share(gap['best_interval'])} at each one's best interval; what holds it back "
              f"(GPU-h more than the oracle): {_worst(r['sentinel_minus_oracle_gpu_hours'])}.\n"
            + f"Replay: {r['replay']['nodes_with_events']} nodes fed around their events, "
              f"{r['replay']['healthy_nodes_fed']} healthy nodes the whole run; false drains scaled to the rest "
              f"(x{r['systems']['sentinel']['false_drain_scale']}); {r['elapsed_s']} s.")


def _share(x: float | None) -> str:
    return "none (the oracle is not above reactive here)" if x is None else f"{100 * x:.1f} %"


def _worst(by_cause: dict[str, float]) -> str:
    ranked = sorted(((v, c) for c, v in by_cause.items() if v > 0), reverse=True)
    return ", ".join(f"{c} {v:g}" for v, c in ranked[:3]) or "nothing"


def main_progress(text: str) -> None:
    print(f"goodput: {text}", file=sys.stderr, flush=True)
