"""``sentinel-bench calibration --scenario NAME``: is the hazard model's probability still a probability on a
fleet unlike the ones it learned from?

The scenario is simulated, its rows built exactly as the trainer builds them (same features, same labels: the
GPU, or its node, fails within the model's horizon), and each row scored. Rows are binned by predicted
probability; each bin reports the mean prediction beside the observed failure share (the reliability curve).
Healthy rows are subsampled and weighted back, so shares are what the fleet would see. Also reported: the
Brier score beside the Brier score of always predicting the base rate, the expected calibration error (ECE,
weighted mean |predicted - observed| over bins), ROC AUC, and precision and recall at the model's threshold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from sentinel.errors import SentinelError
from sentinel.sim import scenario
from sentinel.sim.trainset import HORIZON_S, WINDOW_SAMPLES, cached_model, scenario_dataset
from sentinel.tables import render
from sentinel_models import persistence

EDGES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0 + 1e-9)


def run_calibration(name: str, model: str | None = None, background: bool = True,
                    max_steps: int | None = None) -> dict[str, Any]:
    directory = cached_model() if model is None else model
    hazard = persistence.load(persistence.resolve(directory, Path("sentinel-models")))
    sc = scenario.load(name)
    if not background:
        sc = sc.clean()
    data, _ = scenario_dataset(sc, WINDOW_SAMPLES, hazard.horizon_s or HORIZON_S, max_steps=max_steps)
    if data.positives == 0:
        raise SentinelError(f"{name}: no row precedes a failure within the horizon; nothing to calibrate against")
    p = hazard.probability(data.x)
    y, w = data.y.astype(bool), data.weight
    bins, gaps = [], []
    for lo, hi in zip(EDGES[:-1], EDGES[1:], strict=True):
        inside = (p >= lo) & (p < hi)
        weight = float(w[inside].sum())
        if weight == 0:
            continue
        bins.append({"from": lo, "to": round(min(hi, 1.0), 3), "rows": int(inside.sum()),
                     "predicted": round(float(np.average(p[inside], weights=w[inside])), 4),
                     "observed": round(float(w[inside & y].sum() / weight), 4)})
        gaps.append((weight, abs(bins[-1]["predicted"] - bins[-1]["observed"])))
    total = float(w.sum())
    base = float(w[y].sum() / total)
    brier = float(np.average((p - y) ** 2, weights=w))
    ece = sum(weight * gap for weight, gap in gaps) / total
    above = p >= hazard.threshold
    tp = float(w[above & y].sum())
    return {"scenario": sc.name, "background": background, "model": str(directory), "rows": int(len(y)),
            "positive_rows": int(y.sum()), "base_rate": round(base, 5), "brier": round(brier, 5),
            "brier_base_rate": round(base * (1 - base), 5), "ece": round(float(ece), 4),
            "roc_auc": round(float(roc_auc_score(y, p, sample_weight=w)), 4),
            "threshold": round(hazard.threshold, 4),
            "precision_at_threshold": round(tp / float(w[above].sum()), 4) if above.any() else None,
            "recall_at_threshold": round(tp / float(w[y].sum()), 4), "bins": bins}


def render_calibration(r: dict[str, Any]) -> str:
    world = "realistic" if r["background"] else "clean"
    return (f"{r['scenario']} ({world} background): {r['rows']} rows, {r['positive_rows']} before a failure "
            f"within the horizon; weighted base rate {r['base_rate']}\n"
            + render(r["bins"], [("from", "P from"), ("to", "P to"), ("rows", "rows"), ("predicted", "mean predicted"),
                                 ("observed", "observed share")])
            + f"\n\nBrier {r['brier']} (base rate alone: {r['brier_base_rate']}), ECE {r['ece']}, ROC AUC "
              f"{r['roc_auc']}; at the model's threshold {r['threshold']}: precision "
              f"{r['precision_at_threshold']}, recall {r['recall_at_threshold']}")


def plot_calibration(results: list[dict[str, Any]], path: str) -> None:
    """Reliability curves of one or more runs in one PNG (matplotlib, the optional ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SentinelError("--plot needs matplotlib: pip install 'sentinel-gpu[plot]'") from None
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", label="perfectly calibrated")
    for r in results:
        ax.plot([b["predicted"] for b in r["bins"]], [b["observed"] for b in r["bins"]], marker="o",
                label=f"{r['scenario']} (ECE {r['ece']})")
    ax.set_xlabel("predicted P(failure within horizon)")
    ax.set_ylabel("observed share that failed")
    ax.set_title("Hazard model reliability")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
