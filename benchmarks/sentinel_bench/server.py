"""``sentinel-bench smd|asd --data DIR``: anomaly detection on real server telemetry, beside two baselines.

For each machine in ``DIR`` (format: :mod:`benchmarks.server_data`) every detector is fitted on the training
rows and scores the test rows in time order; alerts come from one shared path (:mod:`models.server_alerts`) and
are scored by :mod:`benchmarks.server_scoring` (event precision, recall, F1, false alarms per machine-day,
lead time, point-adjusted F1). ``overall`` pools the events of all machines (sums of counts, not a mean of
per-machine ratios). ``lomo`` (:mod:`benchmarks.server_lomo`) adds the leave-one-machine-out score of every
detector: what its choices are worth on a machine they were not made on. ``groups`` pools by machine group.
Nothing here reads a test label before scoring is done.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sentinel.tables import render
from sentinel_bench.server_baselines import IsolationForestScorer, Scorer, SentinelScorer, StaticThresholdScorer
from sentinel_bench.server_data import MachineData, load_machine, machine_names
from sentinel_bench.server_evidence import EvidenceCounts, judge, read_interpretation
from sentinel_bench.server_lomo import (
    GridOptions,
    MachineCounts,
    chosen_elsewhere,
    group_of,
    leave_one_machine_out,
    machine_counts,
)
from sentinel_bench.server_scoring import Counts, score_events
from sentinel_models.server_alerts import alert_onsets
from sentinel_models.server_anomaly import RowScores, ServerAnomalyModel

DEFAULT_INTERVAL_S = {"smd": 60.0, "asd": 300.0}  # shared/data READMEs: SMD 1-minute, ASD 5-minute sampling
DETECTORS = ("sentinel", "threshold", "iforest")


@dataclass(frozen=True)
class ServerBenchOptions:
    interval_s: float
    horizon_s: float = 1800.0  # an alert up to 30 min before a segment starts still counts as a hit
    refractory_s: float = 1800.0
    budget_per_day: float = 1.0  # training alerts per machine-day the thresholds allow
    evidence_top: int = 3

    def rows(self, seconds: float) -> int:
        return math.ceil(seconds / self.interval_s - 1e-9)


def _scorers() -> list[Scorer]:
    return [SentinelScorer(), StaticThresholdScorer(), IsolationForestScorer()]


def run_server_bench(dataset: str, folder: Path, options: ServerBenchOptions,
                     progress: Callable[[str], None] = lambda _text: None,
                     choose_on: tuple[Path, float] | None = None) -> dict[str, Any]:
    """``choose_on`` (folder, its sampling interval): also score every detector here with the setting chosen on
    that folder's machines alone (``transfer``)."""
    if options.interval_s <= 0 or options.horizon_s < 0 or options.refractory_s < 0 or options.budget_per_day < 0:
        raise ValueError("interval must be > 0; horizon, refractory and budget >= 0")
    names = machine_names(folder)
    pooled = {d: Counts() for d in DETECTORS}
    timing = {d: {"train_s": 0.0, "score_s": 0.0, "rows": 0} for d in DETECTORS}
    by_machine: dict[str, Any] = {}
    evidence: EvidenceCounts | None = None
    grid = GridOptions(options.interval_s, options.rows(options.horizon_s), options.refractory_s,
                       options.budget_per_day)
    lomo_counts: dict[str, MachineCounts] = {}
    group_counts: dict[str, dict[str, Counts]] = {}
    for i, name in enumerate(names, 1):
        progress(f"{dataset}: {name} ({i}/{len(names)})")
        data = load_machine(folder, name)
        by_machine[name] = {"train_rows": len(data.train), "test_rows": len(data.test)}
        for scorer in _scorers():
            counts, alerts, fit_s, score_s = _run_one(scorer, data, options)
            pooled[scorer.name] += counts
            group = group_counts.setdefault(group_of(name), {d: Counts() for d in DETECTORS})
            group[scorer.name] += counts
            t = timing[scorer.name]
            t["train_s"] += fit_s
            t["score_s"] += score_s
            t["rows"] += len(data.test)
            by_machine[name][scorer.name] = counts.metrics()
            if alerts is not None:
                by_machine[name]["alerts"] = alerts
                segs = read_interpretation(folder, name, data.columns)
                if segs is not None:
                    judged = judge(alerts, segs, options.rows(options.horizon_s))
                    evidence = judged if evidence is None else evidence + judged
                    by_machine[name]["evidence"] = judged.metrics()
        progress(f"{dataset}: {name} leave-one-machine-out candidates")
        lomo_counts[name] = machine_counts(data, grid)

    def summary(name: str) -> dict[str, Any]:
        t = timing[name]
        return pooled[name].metrics() | {
            "train_s": round(t["train_s"], 3),
            "score_rows_per_s": round(t["rows"] / t["score_s"]) if t["score_s"] else None,
        }

    return {
        "dataset": dataset,
        "data": str(folder),
        "machines": len(names),
        "interval_s": options.interval_s,
        "horizon_s": options.horizon_s,
        "refractory_s": options.refractory_s,
        "budget_per_day": options.budget_per_day,
        "overall_is": "pooled events of all machines",
        "overall": summary("sentinel"),
        "baselines": {"threshold": summary("threshold"), "iforest": summary("iforest")},
        "wins": {b: sum(1 for m in by_machine.values() if m["sentinel"]["event_f1"] > m[b]["event_f1"])
                 for b in ("threshold", "iforest")},
        "groups": {g: {d: c.metrics()["event_f1"] for d, c in by_detector.items()}
                   for g, by_detector in sorted(group_counts.items())},
        "lomo": leave_one_machine_out(lomo_counts),
        "transfer": _transfer(lomo_counts, choose_on, options, progress) if choose_on else None,
        "evidence": evidence.metrics() if evidence is not None else None,
        "by_machine": by_machine,
    }


def _transfer(here: dict[str, MachineCounts], choose_on: tuple[Path, float], options: ServerBenchOptions,
              progress: Callable[[str], None]) -> dict[str, Any]:
    folder, interval_s = choose_on
    grid = GridOptions(interval_s, math.ceil(options.horizon_s / interval_s - 1e-9), options.refractory_s,
                       options.budget_per_day)
    elsewhere = {}
    for name in machine_names(folder):
        progress(f"choosing on {folder}: {name}")
        elsewhere[name] = machine_counts(load_machine(folder, name), grid)
    return {"chosen_on": str(folder)} | chosen_elsewhere(here, elsewhere)


def _run_one(scorer: Scorer, data: MachineData, options: ServerBenchOptions
             ) -> tuple[Counts, list[dict[str, Any]] | None, float, float]:
    refractory = options.rows(options.refractory_s)
    started = time.perf_counter()
    train_scores = scorer.fit(data.train, data.columns)
    threshold = scorer.threshold(train_scores, options.interval_s, options.budget_per_day, refractory)
    fitted = time.perf_counter()
    scores = scorer.score(data.test)
    exceed = scores > threshold
    onsets = alert_onsets(exceed, refractory)
    alerts = None
    if isinstance(scorer, SentinelScorer) and scorer.model is not None and scorer.last is not None:
        alerts = _evidence(scorer.model, scorer.last, data, onsets, threshold, options)
    done = time.perf_counter()
    counts = score_events(onsets, data.labels, exceed, options.interval_s, options.rows(options.horizon_s))
    return counts, alerts, fitted - started, done - fitted


def _evidence(model: ServerAnomalyModel, row_scores: RowScores, data: MachineData, onsets: np.ndarray,
              threshold: float, options: ServerBenchOptions) -> list[dict[str, Any]]:
    """Each alert with the metrics behind it (labels are not looked at here)."""
    return [
        {
            "row": int(row),
            "t_s": round(float(row) * options.interval_s, 1),
            "score": round(float(row_scores.combined[row]), 3),
            "threshold": round(threshold, 3),
            "metrics": [
                {"metric": c.metric, "value": round(c.value, 4), "expected": round(c.expected, 4),
                 "score": round(c.score, 2)}
                for c in model.explain(data.test, row_scores, int(row), options.evidence_top)
            ],
        }
        for row in onsets
    ]


SUMMARY_ROWS = (
    ("event_f1", "event F1"), ("event_precision", "event precision"), ("event_recall", "event recall"),
    ("false_alarms_per_day", "false alarms / machine-day"), ("lead_time_mean_s", "mean lead time s"),
    ("detection_delay_mean_s", "mean detection delay s"), ("detected_early", "segments alerted early"),
    ("pa_f1", "point-adjusted F1"), ("alerts", "alerts"),
    ("train_s", "training time s"), ("score_rows_per_s", "scoring rows/s"),
)


def render_server(result: dict[str, Any]) -> str:
    columns = {"sentinel": result["overall"], **result["baselines"]}
    header = [("what", "measure")] + [(name, name) for name in columns]
    rows = [{"what": label, **{name: m[key] for name, m in columns.items()}} for key, label in SUMMARY_ROWS]
    machines = [
        {"machine": name, "segments": m["sentinel"]["segments"],
         **{f"{d}_f1": m[d]["event_f1"] for d in DETECTORS},
         "fa": m["sentinel"]["false_alarms_per_day"], "recall": m["sentinel"]["event_recall"]}
        for name, m in result["by_machine"].items()
    ]
    per_machine_cols = [("machine", "machine"), ("segments", "segments")] + [
        (f"{d}_f1", f"F1 {d}") for d in DETECTORS] + [("fa", "sentinel FA/day"), ("recall", "sentinel recall")]
    lines = [
        f"{result['dataset']}: {result['machines']} machines from {result['data']}, interval "
        f"{result['interval_s']:g} s, horizon {result['horizon_s']:g} s, refractory {result['refractory_s']:g} s, "
        f"budget {result['budget_per_day']:g} training alerts/machine-day",
        f"overall = {result['overall_is']} ({result['overall']['segments']} segments)",
        "",
        render(rows, header),
        "",
        render(machines, per_machine_cols),
        "",
        f"sentinel F1 above threshold on {result['wins']['threshold']}/{result['machines']} machines, "
        f"above iforest on {result['wins']['iforest']}/{result['machines']}",
        "",
        f"{result['lomo']['protocol']}:",
        f"  event F1 sentinel {result['lomo']['event_f1']:.3f}, threshold "
        f"{result['lomo']['baselines']['threshold']['event_f1']:.3f}, iforest "
        f"{result['lomo']['baselines']['iforest']['event_f1']:.3f} (usual: {result['overall']['event_f1']:.3f}, "
        f"{result['baselines']['threshold']['event_f1']:.3f}, {result['baselines']['iforest']['event_f1']:.3f})",
        *(f"  group {g}: " + ", ".join(f"{d} {f1:.3f}" for d, f1 in by_detector.items())
          for g, by_detector in result["lomo"]["groups"].items()),
    ]
    if result.get("transfer"):
        tr = result["transfer"]
        lines.append(f"chosen on {tr['chosen_on']} only: event F1 " + ", ".join(
            f"{d} {tr[d]['event_f1']:.3f} ({tr[d]['choice']})" for d in DETECTORS))
    if result["evidence"]:
        ev = result["evidence"]
        lines.append(f"evidence: the first alert's top metric is one the operators named for "
                     f"{ev['top1_match']:.0%} of {ev['segments_judged']} detected segments "
                     f"(one of its top three: {ev['top3_match']:.0%})")
    example = next((a for m in result["by_machine"].values() for a in m.get("alerts", [])), None)
    if example is not None:
        evidence = ", ".join(f"{c['metric']}={c['value']:.3g} (expected {c['expected']:.3g}, {c['score']:.1f}x)"
                             for c in example["metrics"])
        lines.append(f"example alert (row {example['row']}, score {example['score']:.2f} > {example['threshold']:.2f})"
                     f": {evidence}")
    return "\n".join(lines)
