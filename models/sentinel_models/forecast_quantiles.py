"""Quantile forecasts (p10, p50, p90) of a load target ``h`` bins ahead, from any feature matrix.

Model: three scikit-learn ``HistGradientBoostingRegressor`` with the quantile loss (0.1, 0.5, 0.9) on the change
from a reference (``Rows.level``: the baseline's median, or the job model's expectation) divided by a scale (the
partition's capacity), pooled over every series given to ``fit``. The
caller builds the rows (``Rows``): the aggregate-bin path (``load_rows``, the features of
``models.calendar_features``, the baseline ``models.load_prior``: persistence mixed with the series' levels;
``training_rows`` for fitting, each run of origins with the prior of the bins outside it) or the job-table path
(``models.job_forecast``), so both share the calibration.

Calibration, because a pooled model can be sharper than it should be on a partition it knows less well: two numbers
are chosen per target and horizon on predictions for rows the models were not fitted on. With several series
(clusters), out of sample across them: the series are split into folds (series ``i`` in fold ``i % FOLDS``, so one
cluster per fold up to ``FOLDS``), each fold is predicted by models fitted on the other folds, and the held-out
predictions are pooled: the model will be used on clusters it was not fitted on, and later days of the clusters it
was fitted on say little about those (docs/decisions/0014). With one series, across time: fitted on the older 75 %
of its origins and judged on the newest 25 %. There, ``blend``, the weight of the model against the baseline given
in the rows (0 = the baseline only), the weight with the lowest pinball loss; then ``widen``, a factor on the
distance of p10 and p90 from p50: of the factors whose 80 % interval covers 0.78-0.82 of the held-out truths, the
one with the lowest pinball loss (none: the lowest pinball loss of all; a queue that is empty most of the time is
covered by [0, 0] whatever the width), though the width stays as it is (factor 1) unless another lowers that loss
by more than 1 %. Last, unless the result beats the baseline alone (blend 0) by at least 1 % in pinball loss on
those rows, the baseline is kept (blend 0), its width chosen by the same rule. Then the models are refitted on
every origin (the newest bins matter most) and keep the two numbers. Fits run on one thread (a busy host's OpenMP
threads cost more than they give).

``arrays`` / ``from_arrays`` turn a fitted model into named numpy arrays and back (its trees are
``models.forecast_trees.Trees``), so it is stored without pickle and predicts without scikit-learn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sentinel_models.calendar_features import LOOKBACK, SeriesFeatures
from sentinel_models.forecast import OTHER, LoadSeries
from sentinel_models.forecast_trees import Trees
from sentinel_models.load_prior import LoadPrior, choose_weight
from sentinel_models.quantile_scores import QUANTILES, coverage, pinball

PARAMS: dict[str, Any] = {"loss": "quantile", "max_iter": 60, "learning_rate": 0.05, "max_leaf_nodes": 15,
                          "min_samples_leaf": 40, "early_stopping": False, "random_state": 0}
BLENDS = (0.0, 0.25, 0.5, 0.75, 1.0)
WIDENS = (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 1.75, 2.0)
HOLDOUT = 0.25
BAND = 0.02  # coverage within 0.8 +- BAND counts as calibrated
FOLDS = 10  # at most this many folds of series when calibrating across them
MARGIN = 0.01


@dataclass(frozen=True)
class Rows:
    """Forecast origins of one series at one horizon: features, the value now, its scale and the baseline."""

    order: np.ndarray  # origin index (time order inside the series)
    X: np.ndarray
    level: np.ndarray  # the reference the model's change is from: the baseline's median, or the job expectation
    scale: np.ndarray  # GPUs per unit of the model's target (capacity)
    base: np.ndarray  # (n, 3) baseline quantiles at origin + h
    truth: np.ndarray | None = None  # value at origin + h (fitting only)


class QuantileModel:
    """p10/p50/p90 of one target at one horizon; ``fit`` once, then ``predict`` on rows without truth."""

    def __init__(self, params: dict[str, Any] | None = None, calibrate: bool = True) -> None:
        self.params = {**PARAMS, **(params or {})}
        self.calibrate = calibrate
        self.models: list[Trees] = []
        self.blend, self.widen = 1.0, 1.0

    def fit(self, parts: Sequence[Rows]) -> QuantileModel:
        parts = [p for p in parts if len(p.order)]
        if not parts:
            raise ValueError("no rows to fit on")
        X = np.vstack([p.X for p in parts])
        Y = np.concatenate([(_truth(p) - p.level) / p.scale for p in parts])
        if self.calibrate:  # choose blend and widening on held-out rows, then fit on every row
            self._calibrate(*(self._across_series(parts) if len(parts) > 1 else self._across_time(parts, X, Y)))
        self.models = self._trees(X, Y)
        return self

    def _trees(self, X: np.ndarray, Y: np.ndarray) -> list[Trees]:
        from sklearn.ensemble import HistGradientBoostingRegressor
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            return [Trees.from_sklearn(HistGradientBoostingRegressor(quantile=q, **self.params).fit(X, Y))
                    for q in QUANTILES]

    def _across_time(self, parts: Sequence[Rows], X: np.ndarray, Y: np.ndarray) -> tuple[Rows, np.ndarray]:
        """One series: fitted on its older origins, predicted on the newest ``HOLDOUT`` of them."""
        recent = np.concatenate([p.order >= np.quantile(p.order, 1.0 - HOLDOUT) for p in parts])
        self.models = self._trees(X[~recent], Y[~recent])
        held = _rows_where(parts, recent)
        return held, self._raw(held)

    def _across_series(self, parts: Sequence[Rows]) -> tuple[Rows, np.ndarray]:
        """Several series (clusters): each fold of them predicted by models fitted on the other folds only, as
        the model will meet a cluster it was not fitted on; series ``i`` is in fold ``i % FOLDS``."""
        folds = min(FOLDS, len(parts))
        held, raw = [], []
        for fold in range(folds):
            train = [p for i, p in enumerate(parts) if i % folds != fold]
            test = [p for i, p in enumerate(parts) if i % folds == fold]
            self.models = self._trees(np.vstack([p.X for p in train]),
                                      np.concatenate([(_truth(p) - p.level) / p.scale for p in train]))
            held += test
            raw += [self._raw(p) for p in test]
        return _rows_where(held), np.vstack(raw)

    def _calibrate(self, held: Rows, model: np.ndarray) -> None:
        truth = _truth(held)
        self.blend = min(BLENDS, key=lambda w: pinball(truth, _mix(model, held.base, w)))
        mixed = _mix(model, held.base, self.blend)
        self.widen = _width(truth, mixed)
        # a model that does not clearly beat its own baseline on the held-out rows is not trusted over it;
        # the baseline's width is calibrated the same way
        if pinball(truth, _widened(mixed, self.widen)) > (1.0 - MARGIN) * pinball(truth, held.base):
            self.blend, self.widen = 0.0, _width(truth, held.base)

    def _raw(self, rows: Rows) -> np.ndarray:
        change = np.column_stack([m.predict(rows.X) for m in self.models])
        return np.sort(rows.level[:, None] + change * rows.scale[:, None], axis=1)

    def predict(self, rows: Rows) -> np.ndarray:
        """``(n, 3)`` quantiles p10, p50, p90 (floored at 0, sorted) at each row's origin + h."""
        return _widened(_mix(self._raw(rows), rows.base, self.blend), self.widen)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The fitted model as named numpy arrays (no pickle): its three ``Trees``, blend and widening."""
        out = {f"{prefix}meta": np.array([self.blend, self.widen, float(len(self.models))])}
        for i, trees in enumerate(self.models):
            out.update(trees.arrays(f"{prefix}{i}_"))
        return out

    @classmethod
    def from_arrays(cls, data: Any, prefix: str) -> QuantileModel:
        """The model ``arrays(prefix)`` wrote, ready to ``predict`` with numpy only."""
        blend, widen, count = (float(v) for v in data[f"{prefix}meta"])
        out = cls(calibrate=False)
        out.blend, out.widen = blend, widen
        out.models = [Trees.from_arrays(data, f"{prefix}{i}_") for i in range(int(count))]
        return out


def _truth(rows: Rows) -> np.ndarray:
    if rows.truth is None:
        raise ValueError("rows without truth cannot be fitted on")
    return rows.truth


def _rows_where(parts: Sequence[Rows], mask: np.ndarray | None = None) -> Rows:
    """The rows of ``parts`` one after another, only those ``mask`` keeps (all without one)."""
    if mask is None:
        mask = np.ones(sum(len(p.order) for p in parts), bool)

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts])[mask]

    return Rows(cat("order"), np.vstack([p.X for p in parts])[mask], cat("level"), cat("scale"),
                np.vstack([p.base for p in parts])[mask], cat("truth"))


def _width(truth: np.ndarray, q: np.ndarray) -> float:
    """Of the ``WIDENS`` whose [p10, p90] covers 0.8 +- ``BAND`` of ``truth``, the one with the lowest pinball loss
    (none: the lowest of all); 1 (as is) unless that is more than ``MARGIN`` better: 1 % on a few days is noise."""
    in_band = [a for a in WIDENS if abs(coverage(truth, _widened(q, a)) - 0.8) <= BAND]
    score = {a: pinball(truth, _widened(q, a)) for a in in_band or WIDENS}
    best = min(score, key=score.__getitem__)
    return 1.0 if 1.0 in score and score[1.0] <= (1.0 + MARGIN) * score[best] else best


def _mix(model: np.ndarray, base: np.ndarray, weight: float) -> np.ndarray:
    return np.sort(np.maximum(weight * model + (1.0 - weight) * base, 0.0), axis=1)


def _widened(q: np.ndarray, factor: float) -> np.ndarray:
    mid = q[:, 1:2]
    out = np.column_stack([mid[:, 0] - factor * (mid[:, 0] - q[:, 0]), mid[:, 0],
                           mid[:, 0] + factor * (q[:, 2] - mid[:, 0])])
    return np.maximum(out, 0.0)


def relative(m: np.ndarray) -> np.ndarray:
    """The calendar features (``models.calendar_features.FEATURES``) with every rolling level taken relative to
    the value now: changes, level minus the 1 h / 3 h / 1 d means, 3 h max minus level and level minus 3 h min,
    yesterday's change, same time yesterday minus level, the calendar, the level itself and the other target's
    level (the queue for running GPUs, the running GPUs for the queue). Chosen over the
    absolute levels by leave-one-cluster-out on the Helios clusters (docs/benchmarks.md): a pooled model
    with absolute levels learns each cluster's own range and fails at 24 h on a cluster it has not seen."""
    level = m[:, 0:1]
    return np.column_stack([m[:, 2:5], level - m[:, 5:8], m[:, 8:9] - level, level - m[:, 9:10], m[:, 10:11],
                            m[:, 11:12] - level, m[:, 12:15], level, m[:, 1:2]])


# ----- the aggregate-bin path ------------------------------------------------------------------------------------
def load_features(s: LoadSeries, target: str, origins: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray]:
    """The calendar features of origins of a binned load series (relative to the value now) and their scale."""
    f = SeriesFeatures(s.columns[target], s.columns[OTHER[target]], s.capacity, s.ts)
    k = np.asarray(origins, dtype=int)
    return relative(f.matrix(k, h)), f.scale[k]


def load_rows(s: LoadSeries, target: str, origins: np.ndarray, h: int, prior: LoadPrior,
              with_truth: bool = True) -> Rows:
    """Rows of a binned load series: ``load_features``, as baseline the ``prior`` (persistence mixed with the
    series' levels, ``models.load_prior``), and its median as the reference the model's change is from (chosen
    over the value now on a validation split: docs/benchmarks.md)."""
    y = s.columns[target]
    k = np.asarray(origins, dtype=int)
    X, scale = load_features(s, target, k, h)
    base = prior.quantiles(y[k])
    return Rows(k, X, base[:, 1].copy(), scale, base, y[k + h] if with_truth else None)


def fit_load_models(history: Sequence[LoadSeries], targets: Sequence[str], horizons: Sequence[int],
                    params: dict[str, Any] | None = None) -> dict[tuple[str, int], tuple[QuantileModel, float]]:
    """One ``QuantileModel`` per target and horizon, pooled over ``history`` (every bin of it is training), with
    the weight of persistence in its baseline (``load_prior.choose_weight`` on the same series)."""
    out = {}
    for target in targets:
        for h in horizons:
            usable = [s for s in history if len(s) > LOOKBACK + h]
            weight = choose_weight([s.columns[target] for s in usable], h, LOOKBACK)
            parts = [training_rows(s, target, h, weight) for s in usable]
            out[(target, h)] = (QuantileModel(params).fit(parts), weight)
    return out


def training_rows(s: LoadSeries, target: str, h: int, weight: float) -> Rows:
    """Every origin of ``s`` with a truth ``h`` bins ahead, as one series' rows built in three runs; each run's
    baseline is the prior of the bins outside it (``LoadPrior.outside``): a prior that held the truths it is
    judged on would look better in calibration than it is on new bins, and the model would lean on it too much."""
    y = s.columns[target]
    runs = [load_rows(s, target, k, h, LoadPrior.outside(y, h, lo, hi, weight))
            for k, lo, hi in LoadPrior.blocks(np.arange(LOOKBACK, len(s) - h), h)]
    return _rows_where(runs)
