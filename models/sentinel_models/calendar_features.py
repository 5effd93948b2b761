"""Features of a load series at 10-minute bins: lags, recent change, rolling level, the same time yesterday, and
the calendar of the bin being forecast. Pure numpy over whole arrays, vectorised over forecast origins.

Every feature for origin ``k`` (the last bin known) and horizon ``h`` (bins ahead) reads only bins ``<= k``:
the daily terms look at ``k + h - DAY`` with ``h <= DAY``. Levels are divided by ``scale`` (the partition's
capacity) so one model serves partitions of any size.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

BIN_S = 600.0
DAY = 144  # bins per day
WEEK = 7 * DAY
LOOKBACK = DAY  # the first origin that has every feature

FEATURES = (
    "level", "other_level", "change_10m", "change_1h", "change_3h", "mean_1h", "mean_3h", "mean_1d", "max_3h",
    "min_3h", "yesterday_change", "yesterday_level", "hour_sin", "hour_cos", "weekend",
)


def calendar(ts: np.ndarray) -> np.ndarray:
    """Columns hour-of-day sine and cosine and a weekend flag for bin start times (seconds since the epoch, UTC)."""
    ts = np.asarray(ts, dtype=float)
    day_frac = (ts % 86_400.0) / 86_400.0
    weekday = (np.floor(ts / 86_400.0) + 3) % 7  # 1970-01-01 was a Thursday: Monday = 0
    return np.column_stack([np.sin(2 * np.pi * day_frac), np.cos(2 * np.pi * day_frac), (weekday >= 5).astype(float)])


def rolling(y: np.ndarray, window: int, how: str) -> np.ndarray:
    """Trailing window statistic ending at each bin (the first bins repeat the first value to fill the window)."""
    padded = np.concatenate([np.full(window - 1, y[0]), y])
    view = sliding_window_view(padded, window)
    if how == "mean":
        return view.mean(axis=1)
    if how == "max":
        return view.max(axis=1)
    if how == "min":
        return view.min(axis=1)
    raise ValueError(f"unknown rolling statistic {how!r}")


class SeriesFeatures:
    """Precomputed rolling terms of one target series, so features for many origins cost one gather each."""

    def __init__(self, y: np.ndarray, other: np.ndarray, scale: np.ndarray, ts: np.ndarray) -> None:
        self.y, self.other, self.ts = np.asarray(y, float), np.asarray(other, float), np.asarray(ts, float)
        self.scale = np.maximum(np.asarray(scale, float), 1.0)
        self.mean = {w: rolling(self.y, w, "mean") for w in (6, 18, DAY)}
        self.max18, self.min18 = rolling(self.y, 18, "max"), rolling(self.y, 18, "min")

    def matrix(self, k: np.ndarray, h: int) -> np.ndarray:
        """Feature rows for origins ``k`` (indices, all >= LOOKBACK) at horizon ``h`` bins (1..DAY)."""
        if not 1 <= h <= DAY:
            raise ValueError(f"horizon must be 1..{DAY} bins, got {h}")
        k = np.asarray(k, dtype=int)
        if k.size and k.min() < LOOKBACK:
            raise ValueError(f"origins need {LOOKBACK} bins of history")
        y, c = self.y, self.scale[k]
        cols = [
            y[k] / c,
            self.other[k] / c,
            (y[k] - y[k - 1]) / c,
            (y[k] - y[k - 6]) / c,
            (y[k] - y[k - 18]) / c,
            self.mean[6][k] / c,
            self.mean[18][k] / c,
            self.mean[DAY][k] / c,
            self.max18[k] / c,
            self.min18[k] / c,
            (y[k + h - DAY] - y[k - DAY]) / c,
            y[k + h - DAY] / c,
        ]
        step = self.ts[1] - self.ts[0] if len(self.ts) > 1 else BIN_S
        return np.column_stack([*cols, calendar(self.ts[k] + h * step)])
