"""Leave-one-machine-out (LOMO) scores for ``sentinel-bench smd|asd``: how a detector does on a machine its
choices were not made on.

Every detector gets a small grid of candidate settings (its free choices: residual model, score aggregation,
threshold calibration, false-alarm budget, refractory). For each machine in turn, the candidate with the best
pooled event F1 on *all the other machines* is chosen and scored on the held-out one; the held-out machines'
counts are pooled exactly as ``overall`` is. Ties go to the earlier candidate, and the first candidate of each
grid is the bench's default, so with one machine (nothing to choose on) the LOMO score is the usual one.
The baselines get the same treatment over their own choices, so the comparison stays fair.

The grids are deliberately small: a handful of round values per choice, so that choosing cannot overfit the
other machines much and the bench stays within minutes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from sentinel_bench.server_baselines import IsolationForestScorer, Scorer, SentinelScorer, StaticThresholdScorer
from sentinel_bench.server_data import MachineData
from sentinel_bench.server_scoring import Counts, score_events
from sentinel_models.server_alerts import alert_onsets
from sentinel_models.server_anomaly import ServerAnomalyConfig

PROTOCOL = ("leave-one-machine-out: each machine scored with the candidate that had the best pooled event F1 on "
            "the other machines; held-out counts pooled")
BUDGET_FACTORS = (1.0, 0.5, 2.0)  # x the bench's --budget
REFRACTORY_FACTORS = (1.0, 2.0)  # x the bench's --refractory
SENTINEL_FITS: dict[str, ServerAnomalyConfig] = {
    "ewma0.3-top3-holdout": ServerAnomalyConfig(),
    "ewma0.3-top5-holdout": ServerAnomalyConfig(top_k=5),
    "ewma0.3-top3-holdout-tailfloor0.01": ServerAnomalyConfig(min_tail=0.01),
    "ewma0.3-top3-holdout-tailfloor0.5": ServerAnomalyConfig(min_tail=0.5),
    "last-top3-holdout": ServerAnomalyConfig(alpha=1.0),
    "ewma0.3-top3-insample": ServerAnomalyConfig(calibration_split=0.0),
    "ewma0.3-top5-insample": ServerAnomalyConfig(top_k=5, calibration_split=0.0),
}
IFOREST_FITS = {"insample": 0.0, "holdout": 0.5}

# machine -> detector -> candidate label -> counts
MachineCounts = dict[str, dict[str, Counts]]


@dataclass(frozen=True)
class GridOptions:
    interval_s: float
    horizon_rows: int
    refractory_s: float
    budget_per_day: float

    def rows(self, seconds: float) -> int:
        return int(np.ceil(seconds / self.interval_s - 1e-9))


def _fits() -> Iterable[tuple[str, str, Callable[[], Scorer]]]:
    for label, config in SENTINEL_FITS.items():
        yield "sentinel", label, partial(SentinelScorer, config)
    for label, split in IFOREST_FITS.items():
        yield "iforest", label, partial(IsolationForestScorer, calibration_split=split)
    yield "threshold", "range", StaticThresholdScorer


def machine_counts(data: MachineData, options: GridOptions) -> MachineCounts:
    """Every candidate of every detector on one machine (fitted on its training rows, scored on its test rows)."""
    out: MachineCounts = {"sentinel": {}, "iforest": {}, "threshold": {}}
    for detector, label, make in _fits():
        scorer = make()
        calibration = scorer.fit(data.train, data.columns)
        scores = scorer.score(data.test)
        budgets = BUDGET_FACTORS if detector != "threshold" else (1.0,)  # the range rule has no budget
        for budget in budgets:
            for refractory_factor in REFRACTORY_FACTORS:
                refractory = options.rows(options.refractory_s * refractory_factor)
                threshold = scorer.threshold(calibration, options.interval_s, options.budget_per_day * budget,
                                             refractory)
                exceed = scores > threshold
                onsets = alert_onsets(exceed, refractory)
                name = f"{label}/budget×{budget:g}/refractory×{refractory_factor:g}"
                out[detector][name] = score_events(onsets, data.labels, exceed, options.interval_s,
                                                   options.horizon_rows)
    return out


def group_of(machine: str) -> str:
    """``machine-1-2`` -> ``machine-1``; ``omi-3`` -> ``omi``: the published machine groups."""
    head, sep, _tail = machine.rpartition("-")
    return head if sep else machine


def _pooled(counts: Iterable[Counts]) -> Counts:
    total = Counts()
    for c in counts:
        total += c
    return total


def leave_one_machine_out(per_machine: dict[str, MachineCounts]) -> dict[str, Any]:
    """Choose on the others, score the held-out machine, pool; per detector, with its choices and groups."""
    held_out: dict[str, dict[str, Counts]] = {d: {} for d in ("sentinel", "threshold", "iforest")}
    choices: dict[str, dict[str, str]] = {}
    for machine in per_machine:
        others = [m for m in per_machine if m != machine]
        choices[machine] = {}
        for detector in held_out:
            candidates = list(per_machine[machine][detector])
            best = max(candidates, key=lambda c: _pooled(per_machine[m][detector][c] for m in others).metrics()[
                "event_f1"]) if others else candidates[0]
            choices[machine][detector] = best
            held_out[detector][machine] = per_machine[machine][detector][best]
    groups = sorted({group_of(m) for m in per_machine})
    return _pooled(held_out["sentinel"].values()).metrics() | {
        "protocol": PROTOCOL,
        "candidates": {d: len(next(iter(per_machine.values()))[d]) for d in held_out} if per_machine else {},
        "baselines": {d: _pooled(held_out[d].values()).metrics() for d in ("threshold", "iforest")},
        "groups": {g: {d: _pooled(c for m, c in held_out[d].items() if group_of(m) == g).metrics()["event_f1"]
                       for d in held_out} for g in groups},
        "choices": choices,
    }


def chosen_elsewhere(here: dict[str, MachineCounts], elsewhere: dict[str, MachineCounts]) -> dict[str, Any]:
    """Every machine here scored with the one setting per detector that was best, pooled, on ``elsewhere``
    (another dataset: a whole group of machines never shown)."""
    if not here or not elsewhere:
        raise ValueError("need machines on both sides")
    out: dict[str, Any] = {"protocol": "each detector's setting chosen by pooled event F1 on the other folder "
                                       "only, then applied to every machine here"}
    for detector in ("sentinel", "threshold", "iforest"):
        candidates = list(next(iter(elsewhere.values()))[detector])
        best = max(candidates, key=lambda c: _pooled(m[detector][c] for m in elsewhere.values()).metrics()[
            "event_f1"])
        out[detector] = {"choice": best, "event_f1": _pooled(m[detector][best] for m in here.values()).metrics()[
            "event_f1"]}
    return out
