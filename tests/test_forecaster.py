"""The demand forecaster learns a daily rhythm that the last value cannot follow, and falls back honestly."""

from __future__ import annotations

import numpy as np

from sentinel_models.calendar_features import DAY
from sentinel_models.forecast import DemandForecaster, LoadSeries

START = 1_767_225_600.0  # a Thursday, midnight UTC


def _seasonal(days: int, seed: int = 3) -> LoadSeries:
    n = days * DAY
    t = np.arange(n)
    rng = np.random.default_rng(seed)
    running = np.round(60 + 30 * np.sin(2 * np.pi * t / DAY) + rng.normal(0, 2, n)).clip(0, 100)
    pending = np.round(np.maximum(0, 20 * np.sin(2 * np.pi * t / DAY)) + rng.normal(0, 1, n)).clip(0)
    return LoadSeries.build("vc", START + 600.0 * t, capacity=np.full(n, 100.0), running_gpus=running,
                            pending_gpus=pending)


def _smape(y: np.ndarray, f: np.ndarray) -> float:
    d = np.abs(y) + np.abs(f)
    return float(np.mean(np.where(d == 0, 0, 2 * np.abs(y - f) / np.where(d == 0, 1, d))))


def test_on_a_daily_rhythm_the_model_beats_the_last_value_at_one_and_three_hours() -> None:
    s = _seasonal(10)
    train_end = 8 * DAY
    train = LoadSeries(s.name, s.ts[:train_end], {k: v[:train_end] for k, v in s.columns.items()},
                       s.capacity[:train_end])
    model = DemandForecaster(anchors=(6, 18)).fit([train], targets=["running_gpus"])
    y = s.columns["running_gpus"]
    for h in (6, 18):
        k = np.arange(train_end - 1, len(s) - h)
        ours = _smape(y[k + h], model.predict_change(s, "running_gpus", k, h))
        last = _smape(y[k + h], y[k])
        assert ours < 0.8 * last, (h, ours, last)


def test_forecast_gives_every_bin_with_an_interval_around_the_point() -> None:
    s = _seasonal(4)
    fc = DemandForecaster(anchors=(1, 6, 18)).fit([s]).forecast(s, 18)
    assert fc.method == "gradient_boosting" and not fc.notes
    for target in ("running_gpus", "pending_gpus"):
        points = fc.targets[target]
        assert len(points) == 18
        assert [p.ts for p in points] == [s.ts[-1] + 600.0 * h for h in range(1, 19)]
        assert all(0 <= p.lo <= p.point <= p.hi for p in points)
        assert points[-1].hi - points[-1].lo > 0


def test_a_short_history_falls_back_to_the_last_value_with_a_note() -> None:
    s = _seasonal(10)
    short = LoadSeries(s.name, s.ts[:6], {k: v[:6] for k, v in s.columns.items()}, s.capacity[:6])
    model = DemandForecaster()
    model.fit([short])
    fc = model.forecast(short, 18)
    assert fc.method == "last_value" and "too short to train" in fc.notes[0]
    assert {p.point for p in fc.targets["running_gpus"]} == {float(short.columns["running_gpus"][-1])}


def test_update_refits_only_after_enough_new_bins() -> None:
    s = _seasonal(4)
    model = DemandForecaster(anchors=(1,), refit_every=6, calibrate=False)
    assert model.update([s]) is True  # first fit
    grown = LoadSeries(s.name, s.ts[:-3], {k: v[:-3] for k, v in s.columns.items()}, s.capacity[:-3])
    assert model.update([grown]) is False
    bigger = _seasonal(5)
    assert model.update([bigger]) is True and model.fitted_len["vc"] == len(bigger)
