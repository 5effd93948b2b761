"""Proper scores of quantile forecasts, and the empirical-change baseline they are compared with.

A forecast here is three quantiles per point, ``QUANTILES`` = p10, p50, p90, as columns of an ``(n, 3)`` array.
``pinball`` is the quantile (pinball) loss averaged over the three quantiles and the points, in the target's
units (GPUs); ``interval_score`` is the Gneiting-Raftery score of the central 80 % interval (width plus
``2 / alpha`` times the distance by which the truth falls outside it, alpha = 0.2); ``coverage`` is the share of
truths inside the closed interval [p10, p90]. All three are lower-is-better except coverage, which should be
near 0.8. Pure numpy, no I/O.
"""

from __future__ import annotations

import numpy as np

QUANTILES = (0.1, 0.5, 0.9)
HORIZONS = {"1h": 6, "3h": 18, "6h": 36, "24h": 144}  # the quantile forecasts' horizons, in 10-minute bins
ALPHA = 0.2  # the central interval [p10, p90] holds 1 - ALPHA of the truths when calibrated


def pinball(y: np.ndarray, q: np.ndarray) -> float:
    """Mean pinball loss over the points and the quantiles ``QUANTILES`` (columns of ``q``)."""
    y = np.asarray(y, dtype=float)[:, None]
    levels = np.asarray(QUANTILES)[None, :]
    diff = y - np.asarray(q, dtype=float)
    return float(np.mean(np.maximum(levels * diff, (levels - 1.0) * diff)))


def interval_score(y: np.ndarray, q: np.ndarray) -> float:
    """Mean interval score of [p10, p90]: width + (2 / ALPHA) * how far the truth lies outside."""
    y, lo, hi = np.asarray(y, dtype=float), q[:, 0], q[:, -1]
    return float(np.mean(hi - lo + (2.0 / ALPHA) * (np.maximum(lo - y, 0.0) + np.maximum(y - hi, 0.0))))


def coverage(y: np.ndarray, q: np.ndarray) -> float:
    """Share of truths inside [p10, p90] (bounds included: load moves in whole GPUs)."""
    y = np.asarray(y, dtype=float)
    return float(np.mean((y >= q[:, 0] - 1e-9) & (y <= q[:, -1] + 1e-9)))


def change_quantiles(y: np.ndarray, lag: int, end: int | None = None) -> np.ndarray:
    """The ``QUANTILES`` of ``y[j] - y[j - lag]`` over ``j < end``: the empirical change over ``lag`` bins."""
    y = np.asarray(y, dtype=float)[:end]
    if len(y) <= lag:
        return np.zeros(len(QUANTILES))
    return np.quantile(y[lag:] - y[:-lag], QUANTILES)


def shifted(reference: np.ndarray, change: np.ndarray) -> np.ndarray:
    """Quantile forecasts ``reference + change`` (one row per point), floored at 0 and sorted."""
    out = np.asarray(reference, dtype=float)[:, None] + np.asarray(change, dtype=float)[None, :]
    return np.sort(np.maximum(out, 0.0), axis=1)
