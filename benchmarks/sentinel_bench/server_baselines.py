"""The detectors ``sentinel-bench smd|asd`` compares, behind one small interface.

Each is fitted on the training rows only and scores test rows point by point or causally; each then goes
through the same alert path (:mod:`models.server_alerts`: threshold, one alert per exceedance, refractory).

- ``sentinel``: :class:`models.server_anomaly.ServerAnomalyModel`, threshold from the false-alarm budget spent
  on out-of-sample calibration scores (:func:`models.server_anomaly.calibration_scores`).
- ``threshold``: static per-metric thresholds at each metric's training minimum and maximum (what a
  monitoring rule set fitted on history does); a row exceeds when any metric leaves its training range. Its
  score is the largest excursion as a share of that metric's training range; the threshold is that range (0).
- ``iforest``: scikit-learn IsolationForest on the raw metric vectors (100 trees, fixed seed); score =
  ``-score_samples``; threshold from the same false-alarm budget as Sentinel's, on in-sample training scores
  (``calibration_split`` > 0: a forest fitted on that share of the training rows scores the rest, as Sentinel's
  default does; the leave-one-machine-out score lets the baseline choose that too).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt
from sklearn.ensemble import IsolationForest

from sentinel_models.server_alerts import budget_threshold
from sentinel_models.server_anomaly import RowScores, ServerAnomalyConfig, ServerAnomalyModel, calibration_scores

Vector = npt.NDArray[np.float64]


class Scorer(Protocol):
    name: str

    def fit(self, train: Vector, columns: list[str]) -> Vector:
        """Fit on ``train``; return the scores the threshold is calibrated on (from the training rows only)."""
        ...

    def score(self, rows: Vector) -> Vector: ...

    def threshold(self, train_scores: Vector, interval_s: float, budget_per_day: float, refractory_rows: int
                  ) -> float: ...


class SentinelScorer:
    name = "sentinel"

    def __init__(self, config: ServerAnomalyConfig | None = None) -> None:
        self.config = config
        self.model: ServerAnomalyModel | None = None
        self.last: RowScores | None = None  # per-metric detail of the last score() call, for evidence

    def fit(self, train: Vector, columns: list[str]) -> Vector:
        self.model = ServerAnomalyModel.fit(train, columns, self.config)
        return calibration_scores(train, columns, self.config)

    def score(self, rows: Vector) -> Vector:
        assert self.model is not None, "fit first"
        self.last = self.model.score(rows)[0]
        return self.last.combined

    def threshold(self, train_scores: Vector, interval_s: float, budget_per_day: float, refractory_rows: int
                  ) -> float:
        return budget_threshold(train_scores, interval_s, budget_per_day, refractory_rows)


class StaticThresholdScorer:
    name = "threshold"

    def fit(self, train: Vector, columns: list[str]) -> Vector:
        self.low, self.high = train.min(axis=0), train.max(axis=0)
        self.span = np.maximum(self.high - self.low, 1e-9)
        return self.score(train)

    def score(self, rows: Vector) -> Vector:
        excursion = np.maximum(rows - self.high, self.low - rows) / self.span
        return np.asarray(excursion.max(axis=1), dtype=np.float64)

    def threshold(self, train_scores: Vector, interval_s: float, budget_per_day: float, refractory_rows: int
                  ) -> float:
        return 0.0


class IsolationForestScorer:
    name = "iforest"

    def __init__(self, seed: int = 0, calibration_split: float = 0.0) -> None:
        self.seed, self.calibration_split = seed, calibration_split
        self.forest = IsolationForest(n_estimators=100, random_state=seed)

    def fit(self, train: Vector, columns: list[str]) -> Vector:
        cut = int(len(train) * self.calibration_split)
        if cut >= 2 and len(train) - cut >= 2:
            half = IsolationForest(n_estimators=100, random_state=self.seed).fit(train[:cut])
            calibration = np.asarray(-half.score_samples(train[cut:]), dtype=np.float64)
            self.forest.fit(train)
            return calibration
        self.forest.fit(train)
        return self.score(train)

    def score(self, rows: Vector) -> Vector:
        return np.asarray(-self.forest.score_samples(rows), dtype=np.float64)

    def threshold(self, train_scores: Vector, interval_s: float, budget_per_day: float, refractory_rows: int
                  ) -> float:
        return budget_threshold(train_scores, interval_s, budget_per_day, refractory_rows)
