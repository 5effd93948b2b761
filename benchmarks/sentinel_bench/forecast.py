"""``sentinel-bench forecast``: the demand forecaster against last-value and seasonal-naive baselines on cluster
load traces, rolling origin.

Protocol: bins of 10 minutes; the model is fitted once on every series' first ``train_days`` (pooled over the
series); every bin after that is a forecast origin, and the forecast for ``origin + h`` uses only bins up to the
origin. Baselines in the same run: last value (``y[k]``), seasonal naive day (``y[k + h - 1 day]``) and week
(``y[k + h - 7 days]``). Scores pool every (series, origin) pair: MAE in GPUs and sMAPE in percent,
``200 * |y - f| / (|y| + |f|)`` per point with 0/0 counted as 0 (a correct forecast of an empty queue), then the
mean. The goal is an sMAPE at 1 h and 3 h at least 20 % below the best baseline's.

Quantiles (issue 21), in the same run: p10/p50/p90 at 1 h, 3 h, 6 h and 24 h from ``models.forecast_quantiles``
(fitted on the same training bins), against persistence and seasonal naive with empirical change quantiles
(``benchmarks.quantile_tally``): keys ``model.pinball``, ``model.interval_score80``, ``model.coverage80`` and the
same under ``baselines.<name>``, per target column and horizon; the goal check under ``quantile_goal``. With
``--leave-one-out`` each cluster's quantiles come from models fitted on the other clusters only: how the
model does on a cluster it was not fitted on (the point forecasts are unchanged).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sentinel.errors import ValidationError
from sentinel_bench.quantile_tally import Tally, baselines, render_quantiles
from sentinel_bench.traces import read_traces
from sentinel_models.calendar_features import DAY, WEEK
from sentinel_models.forecast import DemandForecaster, LoadSeries
from sentinel_models.forecast_quantiles import fit_load_models, load_rows
from sentinel_models.load_prior import LoadPrior
from sentinel_models.quantile_scores import HORIZONS as QHORIZONS

HORIZONS = {"10m": 1, "1h": 6, "3h": 18}
TARGETS = {"running_gpus": "running_gpu_num", "pending_gpus": "pending_gpu_num"}
METHODS = ("model", "last", "seasonal_day", "seasonal_week")
GOAL = 0.2


def smape(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    denom = np.abs(y) + np.abs(f)
    return np.where(denom == 0, 0.0, 200.0 * np.abs(y - f) / np.where(denom == 0, 1.0, denom))


def _train_part(s: LoadSeries, end: int) -> LoadSeries:
    return LoadSeries(s.name, s.ts[:end], {k: v[:end] for k, v in s.columns.items()}, s.capacity[:end])


def run_forecast_bench(data: Path, train_days: float = 21.0,
                       progress: Callable[[str], None] | None = None, leave_one_out: bool = False) -> dict[str, Any]:
    say = progress or (lambda _text: None)
    started = time.perf_counter()
    series, skipped = read_traces(data, say)
    train_end = int(round(train_days * DAY))
    short = [s.name for s in series if len(s) < train_end + max(QHORIZONS.values()) + 1]
    if short:
        raise ValidationError(f"series shorter than {train_days:g} days of training plus 24 h of test: "
                              f"{', '.join(short)}")
    if train_end < WEEK:
        raise ValidationError("--train-days must be at least 7 (the weekly baseline needs a week)")
    say(f"fitting on the first {train_days:g} days of {len(series)} series")
    model = DemandForecaster(anchors=tuple(HORIZONS.values()))
    fit_started = time.perf_counter()
    model.fit([_train_part(s, train_end) for s in series])
    fit_s = time.perf_counter() - fit_started
    errors: dict[str, dict[str, dict[str, list[np.ndarray]]]] = {
        m: {t: {h: [] for h in HORIZONS} for t in TARGETS} for m in (*METHODS, "abs_model", "abs_last",
                                                                    "abs_seasonal_day", "abs_seasonal_week")}
    covered: dict[str, dict[str, list[np.ndarray]]] = {t: {h: [] for h in HORIZONS} for t in TARGETS}
    unchanged: dict[str, dict[str, list[np.ndarray]]] = {t: {h: [] for h in HORIZONS} for t in TARGETS}
    per_series: dict[str, Any] = {}
    for i, s in enumerate(series):
        say(f"scoring {s.name} ({i + 1}/{len(series)})")
        per_series[s.name] = {}
        for target, column in TARGETS.items():
            y = s.columns[target]
            for hname, h in HORIZONS.items():
                k = np.arange(train_end - 1, len(s) - h)
                truth = y[k + h]
                unchanged[target][hname].append(truth == y[k])
                forecasts = {"model": model.predict_change(s, target, k, h), "last": y[k],
                             "seasonal_day": y[k + h - DAY], "seasonal_week": y[k + h - WEEK]}
                for method, f in forecasts.items():
                    errors[method][target][hname].append(smape(truth, f))
                    errors[f"abs_{method}"][target][hname].append(np.abs(truth - f))
                lo, hi = model.spread[(target, h)]
                scale = np.maximum(s.capacity[k], 1.0)
                mid = forecasts["model"]
                covered[target][hname].append((truth >= np.maximum(mid + lo * scale, 0) - 1e-9)
                                              & (truth <= mid + hi * scale + 1e-9))
                per_series[s.name].setdefault(column, {})[hname] = {
                    m: round(float(errors[m][target][hname][-1].mean()), 2) for m in METHODS}
    say("fitting and scoring the quantile models (1 h to 24 h)")
    quantile_started = time.perf_counter()
    quantiles = score_quantiles(series, train_end, leave_one_out)
    quantile_s = time.perf_counter() - quantile_started
    result = _summarise(errors, covered, per_series, series, skipped, data, train_days, fit_s,
                        time.perf_counter() - started)
    for method in ("model", *result["baselines"]):
        src = quantiles["model"] if method == "model" else quantiles["baselines"][method]
        (result["model"] if method == "model" else result["baselines"][method]).update(src)
    result["quantile_goal"] = quantiles["goal"]
    result["model_prior"] = quantiles["prior"]
    result["quantile_s"] = round(quantile_s, 1)
    result["quantile_leave_one_out"] = leave_one_out
    # why persistence is hard to beat here: the share of test points whose truth is exactly the value now
    result["truth_equals_last_fraction"] = {c: {h: round(float(np.concatenate(unchanged[t][h]).mean()), 3)
                                                for h in HORIZONS} for t, c in TARGETS.items()}
    return result


def score_quantiles(series: list[LoadSeries], train_end: int, leave_one_out: bool = False) -> dict[str, Any]:
    """Quantile models fitted on every series' first ``train_end`` bins, scored on the rest beside the baselines;
    ``leave_one_out``: each series is scored by models fitted on the other series only (a cluster not seen)."""
    train = [_train_part(s, train_end) for s in series]
    pooled = None if leave_one_out else fit_load_models(train, list(TARGETS), list(QHORIZONS.values()))
    tally = Tally()
    weights: dict[str, dict[str, list[float]]] = {}
    for i, s in enumerate(series):
        models = pooled or fit_load_models(train[:i] + train[i + 1:], list(TARGETS), list(QHORIZONS.values()))
        for target, column in TARGETS.items():
            y = s.columns[target]
            for hname, h in QHORIZONS.items():
                k = np.arange(train_end - 1, len(s) - h)
                model, weight = models[(target, h)]
                rows = load_rows(s, target, k, h, LoadPrior.of(y, h, train_end, weight))
                tally.add("model", column, hname, y[k + h], model.predict(rows))
                tally.add("prior", column, hname, y[k + h], rows.base)
                weights.setdefault(column, {}).setdefault(hname, []).append(weight)
                for name, q in baselines(y, k, h, train_end).items():
                    tally.add(name, column, hname, y[k + h], q)
    # the model's own baseline alone (persistence mixed with the cluster's levels) and its weight of persistence
    prior = {**tally.scores("prior"), "persistence_weight": {
        c: {hname: round(float(np.mean(w)), 3) for hname, w in per_h.items()} for c, per_h in weights.items()}}
    return {**tally.summary(), "prior": prior}


def _summarise(errors: dict[str, Any], covered: dict[str, Any], per_series: dict[str, Any],
               series: list[LoadSeries], skipped: list[str], data: Path, train_days: float, fit_s: float,
               wall_s: float) -> dict[str, Any]:
    def scores(method: str) -> dict[str, Any]:
        return {
            "smape": {c: {h: round(float(np.concatenate(errors[method][t][h]).mean()), 2) for h in HORIZONS}
                      for t, c in TARGETS.items()},
            "mae": {c: {h: round(float(np.concatenate(errors[f"abs_{method}"][t][h]).mean()), 3) for h in HORIZONS}
                    for t, c in TARGETS.items()},
        }

    result: dict[str, Any] = {
        "data": str(data),
        "series": [s.name for s in series],
        "skipped_files": skipped,
        "train_days": train_days,
        "test_origins": int(sum(len(s) - int(round(train_days * DAY)) for s in series)),
        "model": scores("model"),
        "baselines": {m: scores(m) for m in METHODS[1:]},
        "model_interval_80_coverage": {c: {h: round(float(np.concatenate(covered[t][h]).mean()), 3)
                                           for h in HORIZONS} for t, c in TARGETS.items()},
        "per_series_smape": per_series,
        "fit_s": round(fit_s, 1),
        "wall_s": round(wall_s, 1),
    }
    goal: dict[str, Any] = {}
    for column in TARGETS.values():
        for h in ("1h", "3h"):
            best_name = min(METHODS[1:], key=lambda m: result["baselines"][m]["smape"][column][h])
            best = result["baselines"][best_name]["smape"][column][h]
            ours = result["model"]["smape"][column][h]
            gain = 1.0 - ours / best if best > 0 else 0.0
            goal[f"{column}.{h}"] = {"best_baseline": best_name, "model_smape": ours, "best_baseline_smape": best,
                                     "reduction": round(gain, 3), "met": gain >= GOAL}
    result["goal"] = {"target_reduction": GOAL, "met": all(g["met"] for g in goal.values()), "by": goal}
    return result


def render_forecast_bench(result: dict[str, Any]) -> str:
    lines = [f"forecast benchmark on {result['data']}: {len(result['series'])} series, trained on the first "
             f"{result['train_days']:g} days, {result['test_origins']} test origins (fit {result['fit_s']} s, "
             f"total {result['wall_s']} s)", ""]
    head = f"{'target':<16}{'horizon':<9}" + "".join(f"{m:>22}" for m in METHODS) + f"{'80% cover':>11}"
    lines += ["sMAPE % / MAE (GPUs), lower is better", head]
    for column in TARGETS.values():
        for h in HORIZONS:
            cells = []
            for m in METHODS:
                src = result["model"] if m == "model" else result["baselines"][m]
                cells.append(f"{src['smape'][column][h]:>12.2f} / {src['mae'][column][h]:<7.2f}")
            cover = result["model_interval_80_coverage"][column][h]
            lines.append(f"{column:<16}{h:<9}" + "".join(cells) + f"{cover:>11.0%}")
    lines.append("")
    same = result.get("truth_equals_last_fraction", {})
    lines += [f"truth equal to the value now ({column}): " + ", ".join(f"{h} {v:.0%}" for h, v in by.items())
              for column, by in same.items()]
    for key, g in result["goal"]["by"].items():
        verdict = "met" if g["met"] else "NOT met"
        lines.append(f"goal {key}: model sMAPE {g['model_smape']:.2f} vs {g['best_baseline_smape']:.2f} "
                     f"({g['best_baseline']}): {g['reduction']:.1%} lower, needs >= "
                     f"{result['goal']['target_reduction']:.0%}: {verdict}")
    if "quantile_goal" in result:
        lines += ["", *render_quantiles({"goal": result["quantile_goal"], "baselines": result["baselines"]})]
    if "model_prior" in result:  # what the trees add over the model's own baseline
        prior = result["model_prior"]
        lines.append("the model's baseline alone (persistence mixed with the cluster's levels; persistence weight):")
        lines += [f"  {column:<16}" + "  ".join(f"{h} {v:.3f} ({prior['persistence_weight'][column][h]:g})"
                                                for h, v in per_h.items())
                  for column, per_h in prior["pinball"].items()]
    if result["skipped_files"]:
        lines.append(f"skipped (not this format): {', '.join(result['skipped_files'])}")
    return "\n".join(lines)
