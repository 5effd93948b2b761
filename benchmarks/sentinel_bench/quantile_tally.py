"""The quantile part of the load-forecast benchmarks: baselines with empirical change quantiles, pooled scores,
and the goal check, shared by ``bench forecast`` (aggregate bins) and ``bench forecast-jobs`` (a job trace).

Baselines, each a reference value plus the series' own empirical quantiles (p10, p50, p90) of the change over the
same lag, fitted on the training bins only: ``last`` (reference ``y[k]``, change over ``h`` bins),
``seasonal_day`` (``y[k + h - 1 day]``, change over a day) and ``seasonal_week`` (``y[k + h - 7 days]``, change
over a week). Scores pool every (series, origin) pair: pinball loss (mean over the three quantiles, GPUs),
interval score of [p10, p90] and its coverage (``models.quantile_scores``).

Goal (issue 21): pinball at 6 h and 24 h at least 15 % below the best baseline's, not above it at 1 h and 3 h,
and the model's 80 % coverage within 0.75-0.85.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sentinel_models.calendar_features import DAY, WEEK
from sentinel_models.quantile_scores import change_quantiles, coverage, interval_score, pinball, shifted

BASELINES = {"last": 0, "seasonal_day": DAY, "seasonal_week": WEEK}  # name -> seasonal lag (0: persistence)
GOAL_FAR, GOAL_COVER = 0.15, (0.75, 0.85)


def baselines(y: np.ndarray, k: np.ndarray, h: int, train_end: int) -> dict[str, np.ndarray]:
    """Each baseline's ``(n, 3)`` quantiles at ``k + h``, from bins before ``train_end`` and up to ``k``."""
    out = {}
    for name, lag in BASELINES.items():
        if lag == 0:
            out[name] = shifted(y[k], change_quantiles(y, h, train_end))
        else:
            out[name] = shifted(y[k + h - lag], change_quantiles(y, lag, train_end))
    return out


class Tally:
    """Pooled truths and quantile forecasts per method, target and horizon."""

    def __init__(self) -> None:
        self.parts: dict[tuple[str, str, str], list[tuple[np.ndarray, np.ndarray]]] = {}

    def add(self, method: str, target: str, horizon: str, truth: np.ndarray, q: np.ndarray) -> None:
        self.parts.setdefault((method, target, horizon), []).append((np.asarray(truth, float), np.asarray(q, float)))

    def scores(self, method: str) -> dict[str, Any]:
        out: dict[str, Any] = {"pinball": {}, "interval_score80": {}, "coverage80": {}}
        for (m, target, horizon), parts in self.parts.items():  # insertion order: targets, then horizons
            if m != method:
                continue
            y = np.concatenate([p[0] for p in parts])
            q = np.vstack([p[1] for p in parts])
            out["pinball"].setdefault(target, {})[horizon] = round(pinball(y, q), 4)
            out["interval_score80"].setdefault(target, {})[horizon] = round(interval_score(y, q), 3)
            out["coverage80"].setdefault(target, {})[horizon] = round(coverage(y, q), 3)
        return out

    def summary(self) -> dict[str, Any]:
        """``{"model": scores, "baselines": {name: scores}, "goal": ...}`` with scores keyed metric.target.horizon."""
        model = self.scores("model")
        base = {name: self.scores(name) for name in BASELINES if any(k[0] == name for k in self.parts)}
        return {"model": model, "baselines": base, "goal": goal(model, base)}


def goal(model: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    by: dict[str, Any] = {}
    for target, per_h in model["pinball"].items():
        for horizon, ours in per_h.items():
            best_name = min(base, key=lambda n: base[n]["pinball"][target][horizon])
            best = base[best_name]["pinball"][target][horizon]
            gain = 1.0 - ours / best if best > 0 else 0.0
            need = GOAL_FAR if horizon in ("6h", "24h") else 0.0
            cover = model["coverage80"][target][horizon]
            by[f"{target}.{horizon}"] = {
                "best_baseline": best_name, "model_pinball": ours, "best_baseline_pinball": best,
                "reduction": round(gain, 3), "needs": need, "coverage80": cover,
                "met": gain >= need and GOAL_COVER[0] <= cover <= GOAL_COVER[1]}
    return {"met": all(g["met"] for g in by.values()), "by": by}


def render_quantiles(summary: dict[str, Any]) -> list[str]:
    """Table lines: pinball of the model and each baseline, the model's coverage and the goal per row."""
    names = list(summary["baselines"])
    lines = ["pinball loss (GPUs, mean over p10/p50/p90; lower is better) and the model's 80 % coverage",
             f"{'target':<18}{'horizon':<9}{'model':>10}" + "".join(f"{n:>15}" for n in names)
             + f"{'cover80':>9}{'vs best':>9}  goal"]
    for key, g in summary["goal"]["by"].items():
        target, horizon = key.rsplit(".", 1)
        cells = "".join(f"{summary['baselines'][n]['pinball'][target][horizon]:>15.3f}" for n in names)
        lines.append(f"{target:<18}{horizon:<9}{g['model_pinball']:>10.3f}{cells}{g['coverage80']:>9.0%}"
                     f"{-g['reduction']:>+9.1%}  {'met' if g['met'] else 'NOT met'}")
    return lines
