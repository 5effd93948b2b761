"""The hazard model: P(this GPU fails within the horizon) from its window features, calibrated, with the
alerting threshold chosen for a target precision on nodes the model never saw; and an IsolationForest over the
same features for anomalies that no rule names.

Fitting splits by node (a quarter of the nodes are held out), so the threshold and the reported precision and
recall are measured on GPUs whose every sample was unseen. Healthy rows are subsampled by the trainer; their
weights restore the real base rate in both the fit and the threshold choice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import HistGradientBoostingClassifier, IsolationForest
from sklearn.metrics import roc_auc_score
from threadpoolctl import ThreadpoolController

from sentinel_models.features import FEATURES
from sentinel_models.isolation_paths import IsolationPaths
from sentinel_models.training import Dataset

ANOMALY_QUANTILE = 0.9999  # of healthy training rows: the anomaly finding is rare by construction


@dataclass
class HazardModel:
    classifier: Any
    threshold: float
    horizon_s: float
    anomaly: Any
    anomaly_threshold: float
    features: tuple[str, ...] = FEATURES
    report: dict[str, Any] = field(default_factory=dict)
    # Median and spread of each feature over healthy rows: evidence names the features furthest from them.
    healthy_median: np.ndarray = field(default_factory=lambda: np.zeros(len(FEATURES)))
    healthy_scale: np.ndarray = field(default_factory=lambda: np.ones(len(FEATURES)))

    def unusual(self, row: np.ndarray, top: int = 4) -> dict[str, float]:
        """The ``top`` features of ``row`` furthest from healthy, by robust distance, with their values."""
        distance = np.abs(_clean(row) - self.healthy_median) / self.healthy_scale
        order = np.argsort(-distance, kind="stable")[:top]
        return {self.features[i]: round(float(row[i]), 3) for i in order if distance[i] > 0}

    def probability(self, x: np.ndarray) -> np.ndarray:
        """P(failure within ``horizon_s``) per row of ``x`` (rows, len(features))."""
        if len(x) == 0:
            return np.zeros(0)
        # One thread: for a batch of a few thousand rows OpenMP's start-up and spinning cost 10x the work
        # (measured 0.42 s vs 0.04 s for 1,024 rows on 2 busy cores), and the detector has its own loop to run.
        with _one_thread():
            return _calibrated_positive(self.classifier, _clean(x))

    def anomaly_score(self, x: np.ndarray) -> np.ndarray:
        """Higher is more anomalous; above ``anomaly_threshold`` is rarer than ANOMALY_QUANTILE of healthy rows."""
        if len(x) == 0:
            return np.zeros(0)
        paths = self.__dict__.get("_paths")
        if paths is None:  # built on first use, never persisted (the pickle holds the fitted forest only)
            paths = self.__dict__["_paths"] = IsolationPaths(self.anomaly)
        return paths.score(_clean(x))


_POOLS: list[ThreadpoolController] = []


def _one_thread() -> Any:
    """Limit OpenMP/BLAS to one thread; the controller is built once (``threadpool_limits`` rescans the loaded
    libraries on every call: 2 ms, more than a small batch's scoring)."""
    if not _POOLS:
        _POOLS.append(ThreadpoolController())
    return _POOLS[0].limit(limits=1)


def _calibrated_positive(classifier: Any, x: np.ndarray) -> np.ndarray:
    """P(positive class) of a binary isotonic ``CalibratedClassifierCV``, as its ``predict_proba`` computes it
    (the mean over folds of each fold's calibrator applied to its estimator's decision function) without the
    per-call response checks that cost more than the trees for a few dozen rows (tested equal). Any other
    classifier goes through ``predict_proba``."""
    folds = getattr(classifier, "calibrated_classifiers_", None)
    if getattr(classifier, "method", None) != "isotonic" or not folds or len(classifier.classes_) != 2:
        return np.asarray(classifier.predict_proba(x)[:, 1])
    total = np.zeros(len(x))
    for fold in folds:
        total += fold.calibrators[0].predict(fold.estimator.decision_function(x))
    return total / len(folds)


def _clean(x: np.ndarray) -> np.ndarray:
    return np.nan_to_num(np.asarray(x, np.float64), nan=0.0, posinf=1e12, neginf=-1e12)


def fit(data: Dataset, horizon_s: float, target_precision: float = 0.95, seed: int = 0) -> HazardModel:
    if data.positives < 10:
        raise ValueError(f"only {data.positives} positive rows: the data holds too few failures with a precursor "
                         "to learn from (export a longer or busier scenario)")
    held_out = (np.random.default_rng(seed).random(int(data.node.max()) + 1) < 0.25)[data.node]
    train, valid = ~held_out, held_out
    started = time.perf_counter()
    base = HistGradientBoostingClassifier(max_iter=200, learning_rate=0.1, max_leaf_nodes=31,
                                          l2_regularization=1.0, random_state=seed)
    classifier = CalibratedClassifierCV(base, method="isotonic", cv=3)
    x = _clean(data.x)
    classifier.fit(x[train], data.y[train], sample_weight=data.weight[train])
    fit_s = time.perf_counter() - started
    p = np.asarray(classifier.predict_proba(x[valid])[:, 1])
    threshold, precision, recall = choose_threshold(p, data.y[valid], data.weight[valid], target_precision)
    healthy = np.flatnonzero(data.y == 0)
    sample = np.random.default_rng(seed).choice(healthy, size=min(len(healthy), 50_000), replace=False)
    anomaly = IsolationForest(n_estimators=100, random_state=seed).fit(x[sample])
    scores = -anomaly.score_samples(x[sample])
    report = {
        "rows": int(len(data.y)), "positive_rows": data.positives, "train_rows": int(train.sum()),
        "validation_rows": int(valid.sum()), "fit_s": round(fit_s, 2),
        "validation": {"target_precision": target_precision, "precision": round(precision, 4),
                       "recall": round(recall, 4),
                       "roc_auc": round(float(roc_auc_score(data.y[valid], p, sample_weight=data.weight[valid])), 4)
                       if 0 < data.y[valid].sum() < valid.sum() else None},
    }
    healthy_x = x[sample]
    median = np.median(healthy_x, axis=0)
    q75, q25 = np.percentile(healthy_x, [75, 25], axis=0)
    scale = np.maximum(q75 - q25, np.maximum(np.abs(median) * 0.05, 1e-3))
    return HazardModel(classifier, threshold, horizon_s, anomaly, float(np.quantile(scores, ANOMALY_QUANTILE)),
                       FEATURES, report, median, scale)


def choose_threshold(p: np.ndarray, y: np.ndarray, weight: np.ndarray, target: float) -> tuple[float, float, float]:
    """The lowest threshold whose weighted precision on (p, y) reaches ``target`` (the highest score seen when
    none does), with that precision and recall. Rows are counted with their weights (healthy rows were
    subsampled), so precision is what the fleet would see."""
    order = np.argsort(-p, kind="stable")
    p_sorted, y_sorted, w_sorted = p[order], y[order].astype(bool), weight[order]
    tp = np.cumsum(np.where(y_sorted, w_sorted, 0.0))
    fp = np.cumsum(np.where(y_sorted, 0.0, w_sorted))
    positives = float(np.where(y_sorted, w_sorted, 0.0).sum())
    # Only cut between distinct scores: rows with the same score are all in or all out.
    last_of_run = np.r_[p_sorted[1:] != p_sorted[:-1], True]
    precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1e-12), 0.0)
    good = np.flatnonzero(last_of_run & (precision >= target) & (p_sorted > 0))
    if len(good) == 0 or positives == 0:
        return float(p_sorted[0]) if len(p_sorted) else 1.0, 0.0, 0.0
    i = int(good[-1])
    return float(p_sorted[i]), float(precision[i]), float(tp[i] / positives)
