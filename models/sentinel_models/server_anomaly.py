"""Multivariate anomaly detector for server telemetry: anomalies that no rule names, with the metrics behind them.

Method (decision 0006), fitted on unlabelled training rows only:

1. **Robust standardisation** per metric: ``z = (x - median) / s`` with ``s = max(IQR / 1.349, 0.1 * std,
   min_scale)``; the floors keep metrics that were constant in training from dividing by zero.
2. **Short-window forecast residual**: ``r_t = z_t - EWMA_{t-1}(z)`` (``alpha`` = weight of the newest row). Only
   rows before ``t`` enter the forecast, so scoring is causal and can continue chunk by chunk (``EwmaState``).
3. **Tail normalisation**: each metric's ``|r|`` is divided by its own ``tail_quantile`` (0.99) of ``|r|`` on
   training, so 1.0 means "as large as the 1 % largest moves this metric made in training". A metric that is
   always noisy does not drown a quiet one that suddenly moves. The tail has a floor (``min_tail``, in z units):
   a metric that was constant or step-like in training would otherwise turn any later wobble into a huge score.
4. **Combined score** = mean of the ``top_k`` largest per-metric scores of the row: one wild metric is less
   convincing than three that move together.

The alert threshold is calibrated on scores the model did not fit (:func:`calibration_scores`): a model fitted on
the first ``calibration_split`` of the training rows scores the rest, so the threshold already pays for the drift
a machine shows between the rows a model learns from and the rows that follow them (the in-sample scores of the
training rows are optimistic, and the false-alarm budget then overspends on every machine that drifts). Choices
were made by leave-one-machine-out over the SMD and ASD machines (docs/detection.md). Thresholds and dedup live
in :mod:`models.server_alerts` (shared with the baselines).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.signal import lfilter

Matrix = npt.NDArray[np.float64]
MIN_CALIBRATION_ROWS = 30  # fewer rows on either side of the calibration split: calibrate in-sample


@dataclass(frozen=True)
class ServerAnomalyConfig:
    alpha: float = 0.3  # EWMA weight of the newest row: ~3-row memory
    top_k: int = 3
    tail_quantile: float = 0.99
    min_scale: float = 0.01  # in the data's units (SMD and ASD are scaled to [0, 1])
    # in robust-z units: a metric that hardly moved in training cannot turn a tiny move into a huge score
    # (0.1-0.3 is a plateau on SMD and ASD by leave-one-machine-out; 0.01 lets such metrics dominate)
    min_tail: float = 0.2
    calibration_split: float = 0.5  # share of training rows the calibration model fits; 0 = score them in-sample

    def __post_init__(self) -> None:
        if not 0 < self.alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha}")
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if not 0.5 <= self.tail_quantile <= 1:
            raise ValueError(f"tail_quantile must be in [0.5, 1], got {self.tail_quantile}")
        if self.min_scale <= 0 or self.min_tail <= 0:
            raise ValueError("min_scale and min_tail must be > 0")
        if not 0 <= self.calibration_split < 1:
            raise ValueError(f"calibration_split must be in [0, 1), got {self.calibration_split}")


@dataclass(frozen=True)
class EwmaState:
    """The forecast after the last row scored, in robust-z units: all a stream needs to continue."""

    level: npt.NDArray[np.float64]


@dataclass(frozen=True)
class RowScores:
    """Scores of a block of rows: ``combined`` (rows,), ``per_metric`` and ``expected`` (rows, metrics)."""

    combined: npt.NDArray[np.float64]
    per_metric: Matrix
    expected: Matrix  # the forecast for each row, in the data's units


@dataclass(frozen=True)
class Contribution:
    metric: str
    value: float
    expected: float
    score: float  # |residual| / the metric's training tail; > 1 = beyond its usual largest moves


class ServerAnomalyModel:
    """A fitted detector. Build with :meth:`fit`; score rows in time order with :meth:`score`."""

    def __init__(self, columns: list[str], center: Matrix, scale: Matrix, tail: Matrix,
                 config: ServerAnomalyConfig, end_state: EwmaState) -> None:
        self.columns, self.center, self.scale, self.tail = columns, center, scale, tail
        self.config = config
        self.end_state = end_state  # after the training rows: where a test stream that follows them starts

    @classmethod
    def fit(cls, train: Matrix, columns: list[str], config: ServerAnomalyConfig | None = None) -> ServerAnomalyModel:
        cfg = config or ServerAnomalyConfig()
        x = _check(train, columns)
        if x.shape[0] < 2:
            raise ValueError("need at least 2 training rows")
        center = np.median(x, axis=0)
        q1, q3 = np.quantile(x, [0.25, 0.75], axis=0)
        scale = np.maximum.reduce([(q3 - q1) / 1.349, 0.1 * x.std(axis=0), np.full(x.shape[1], cfg.min_scale)])
        model = cls(columns, center, scale, np.ones(x.shape[1]), cfg, EwmaState(np.zeros(x.shape[1])))
        residual, end = model._residual(model._z(x), model.cold_start(x[0]))
        model.tail = np.maximum(np.quantile(np.abs(residual), cfg.tail_quantile, axis=0), cfg.min_tail)
        model.end_state = end
        return model

    def score(self, rows: Matrix, state: EwmaState | None = None) -> tuple[RowScores, EwmaState]:
        """Score ``rows`` (time order) continuing from ``state`` (default: right after the training rows)."""
        x = _check(rows, self.columns)
        z = self._z(x)
        residual, end = self._residual(z, state or self.end_state)
        per_metric = np.abs(residual) / self.tail
        k = min(self.config.top_k, per_metric.shape[1])
        combined = np.sort(per_metric, axis=1)[:, -k:].mean(axis=1) if len(x) else np.zeros(0)
        expected = (z - residual) * self.scale + self.center
        return RowScores(combined, per_metric, expected), end

    def cold_start(self, first_row: npt.NDArray[np.float64]) -> EwmaState:
        """The state of a stream with no history: its first row is its own forecast."""
        return EwmaState(self._z(np.asarray(first_row, dtype=np.float64)[None, :])[0].copy())

    def explain(self, rows: Matrix, scores: RowScores, row: int, top: int = 3) -> list[Contribution]:
        """The ``top`` metrics behind row ``row``'s score, largest first, with value and expected value."""
        order = np.argsort(scores.per_metric[row])[::-1][:top]
        return [Contribution(self.columns[j], float(rows[row, j]), float(scores.expected[row, j]),
                             float(scores.per_metric[row, j])) for j in order]

    def _z(self, x: Matrix) -> Matrix:
        z: Matrix = (x - self.center) / self.scale
        return z

    def _residual(self, z: Matrix, state: EwmaState) -> tuple[Matrix, EwmaState]:
        if len(z) == 0:
            return np.zeros_like(z), state
        a = self.config.alpha
        smoothed, _ = lfilter([a], [1.0, a - 1.0], z, axis=0, zi=((1 - a) * state.level)[None, :])
        forecast = np.vstack([state.level[None, :], smoothed[:-1]])
        return z - forecast, EwmaState(smoothed[-1].copy())


def calibration_scores(train: Matrix, columns: list[str], config: ServerAnomalyConfig | None = None
                       ) -> npt.NDArray[np.float64]:
    """Combined scores to calibrate an alert threshold on: out of sample when ``config.calibration_split`` > 0.

    With a split ``f``, a model fitted on the first ``f`` of ``train`` scores the remaining rows in time order
    (continuing from its own training rows); too few rows on either side fall back to in-sample scores.
    """
    cfg = config or ServerAnomalyConfig()
    x = _check(train, columns)
    cut = int(len(x) * cfg.calibration_split)
    if cfg.calibration_split > 0 and cut >= MIN_CALIBRATION_ROWS and len(x) - cut >= MIN_CALIBRATION_ROWS:
        return ServerAnomalyModel.fit(x[:cut], columns, cfg).score(x[cut:])[0].combined
    model = ServerAnomalyModel.fit(x, columns, cfg)
    return model.score(x, model.cold_start(x[0]))[0].combined


def _check(rows: Matrix, columns: list[str]) -> Matrix:
    x = np.asarray(rows, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != len(columns):
        raise ValueError(f"expected rows of {len(columns)} metrics, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("rows contain NaN or infinite values")
    return x
