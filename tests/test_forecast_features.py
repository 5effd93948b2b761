"""Forecast features are pure functions of the series, checked with literals."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from sentinel_models.calendar_features import DAY, FEATURES, LOOKBACK, SeriesFeatures, calendar, rolling


def test_calendar_of_saturday_noon_is_weekend_and_half_a_day() -> None:
    ts = datetime(2020, 5, 2, 12, 0, tzinfo=UTC).timestamp()  # a Saturday
    sin, cos, weekend = calendar(np.array([ts]))[0]
    assert sin == pytest.approx(0.0, abs=1e-9) and cos == pytest.approx(-1.0) and weekend == 1.0
    monday = datetime(2020, 5, 4, 6, 0, tzinfo=UTC).timestamp()
    assert calendar(np.array([monday]))[0].tolist() == pytest.approx([1.0, 0.0, 0.0], abs=1e-9)


def test_rolling_windows_trail_and_pad_with_the_first_value() -> None:
    y = np.array([1.0, 3.0, 5.0, 7.0])
    assert rolling(y, 2, "mean").tolist() == [1.0, 2.0, 4.0, 6.0]
    assert rolling(y, 3, "max").tolist() == [1.0, 3.0, 5.0, 7.0]
    assert rolling(y, 3, "min").tolist() == [1.0, 1.0, 1.0, 3.0]


def test_features_read_levels_changes_and_yesterday_scaled_by_capacity() -> None:
    n = LOOKBACK + 30
    y = np.arange(n, dtype=float)  # one more GPU every bin
    other = np.full(n, 4.0)
    ts = 1_588_291_200.0 + 600.0 * np.arange(n)
    f = SeriesFeatures(y, other, np.full(n, 10.0), ts)
    row = dict(zip(FEATURES, f.matrix(np.array([n - 1]), 6)[0], strict=True))
    k = n - 1
    assert row["level"] == pytest.approx(k / 10)
    assert row["other_level"] == pytest.approx(0.4)
    assert row["change_10m"] == pytest.approx(0.1) and row["change_1h"] == pytest.approx(0.6)
    assert row["mean_1h"] == pytest.approx((k - 2.5) / 10)
    assert row["yesterday_level"] == pytest.approx((k + 6 - DAY) / 10)
    assert row["yesterday_change"] == pytest.approx(0.6)


def test_features_refuse_origins_without_a_day_of_history() -> None:
    n = LOOKBACK + 5
    f = SeriesFeatures(np.zeros(n), np.zeros(n), np.ones(n), 600.0 * np.arange(n))
    with pytest.raises(ValueError, match="history"):
        f.matrix(np.array([LOOKBACK - 1]), 1)
    with pytest.raises(ValueError, match="horizon"):
        f.matrix(np.array([LOOKBACK]), DAY + 1)
