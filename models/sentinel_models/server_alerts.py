"""From per-row anomaly scores to alerts: a threshold calibrated on training, and one alert per episode.

Shared by Sentinel's server detector and the baselines it is measured against, so that a difference in the
benchmark comes from the scores, not from how alerts are raised.

- **Threshold** (:func:`budget_threshold`): the lowest threshold, on a grid of training-score quantiles, at
  which the *training* rows would have raised at most ``budget_per_day`` alerts per day. The operator states a
  false-alarm budget in alerts per machine-day; the threshold follows from each machine's own training scores
  and sampling interval, with no label anywhere.
  When the calibration rows span less time than one budgeted alert (``allowed`` < 1: a node with a day of
  history, a budget of one a day), the largest calibration score is not enough: new rows beat the largest of
  a few hundred about once in a few hundred rows. The threshold then extrapolates the scores' upper tail as
  exponential (above their 90th percentile, scale = the mean excess) to where the rows of one day would exceed
  it ``budget_per_day`` times, and never goes below the largest calibration score.
- **Dedup** (:func:`alert_onsets`): a row raises an alert when its score crosses the threshold (the previous row
  did not exceed it) and no alert was raised in the ``refractory_rows`` before: one alert per contiguous
  exceedance, and at most one per refractory period for a flapping score.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

DAY_S = 86_400.0
QUANTILE_GRID = np.linspace(0.9, 1.0, 1001)


def alert_onsets(exceed: npt.ArrayLike, refractory_rows: int) -> npt.NDArray[np.int64]:
    """Row indices that raise an alert, given the per-row exceedances of one machine in time order."""
    flags = np.asarray(exceed, dtype=bool)
    if refractory_rows < 0:
        raise ValueError(f"refractory must be >= 0 rows, got {refractory_rows}")
    starts = np.flatnonzero(flags & ~np.concatenate(([False], flags[:-1])))
    onsets: list[int] = []
    for row in starts.tolist():
        if not onsets or row - onsets[-1] >= refractory_rows:
            onsets.append(row)
    return np.asarray(onsets, dtype=np.int64)


def budget_threshold(train_scores: npt.ArrayLike, interval_s: float, budget_per_day: float,
                     refractory_rows: int) -> float:
    """The lowest grid threshold at which ``train_scores`` raise at most ``budget_per_day`` alerts per day.

    Alert counts fall (almost always) as the threshold rises, so the grid is bisected; the top of the grid, the
    training maximum, raises none.
    """
    scores = np.asarray(train_scores, dtype=np.float64)
    if scores.size == 0:
        raise ValueError("no training scores to calibrate a threshold on")
    if interval_s <= 0 or budget_per_day < 0:
        raise ValueError("interval_s must be > 0 and budget_per_day >= 0")
    allowed = budget_per_day * scores.size * interval_s / DAY_S
    if allowed < 1:
        return _extrapolated(scores, interval_s, budget_per_day)
    grid = np.unique(np.quantile(scores, QUANTILE_GRID))
    lo, hi = 0, len(grid) - 1  # grid[hi] = max: nothing exceeds it
    while lo < hi:
        mid = (lo + hi) // 2
        if len(alert_onsets(scores > grid[mid], refractory_rows)) <= allowed:
            hi = mid
        else:
            lo = mid + 1
    return float(grid[lo])


def _extrapolated(scores: npt.NDArray[np.float64], interval_s: float, budget_per_day: float) -> float:
    """Exponential upper tail: P(score > t) = 0.1 exp(-(t - q90) / mean excess); t where a day's rows exceed
    it ``budget_per_day`` times (rows, not alerts: a little above what the budget needs)."""
    top = float(scores.max())
    q90 = float(np.quantile(scores, 0.9))
    excess = scores[scores > q90] - q90
    if budget_per_day <= 0 or excess.size == 0:
        return top
    rows_per_day = DAY_S / interval_s
    return max(top, q90 + float(excess.mean()) * math.log(max(0.1 * rows_per_day / budget_per_day, 1.0)))
