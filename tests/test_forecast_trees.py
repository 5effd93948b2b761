"""Fitted gradient boosting as numpy arrays: the same predictions as scikit-learn, and a stored forecaster
answers as the fitted one did."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor

from sentinel_models.forecast import DemandForecaster, LoadSeries
from sentinel_models.forecast_trees import Trees, from_bytes, to_bytes


def test_trees_predict_what_sklearn_predicts_including_nan_rows() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(600, 5))
    X[rng.random(X.shape) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0]) * 2 + np.sin(np.nan_to_num(X[:, 1])) + rng.normal(0, 0.1, 600)
    for loss in ({"loss": "quantile", "quantile": 0.5}, {"loss": "squared_error"}):
        model = HistGradientBoostingRegressor(max_iter=40, max_leaf_nodes=15, random_state=0, **loss).fit(X, y)
        trees = Trees.from_sklearn(model)
        test = rng.normal(size=(300, 5))
        test[rng.random(test.shape) < 0.1] = np.nan
        np.testing.assert_allclose(trees.predict(test), model.predict(test), rtol=0, atol=1e-9)


def test_trees_round_trip_through_bytes() -> None:
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(300, 3)), rng.normal(size=300)
    trees = Trees.from_sklearn(HistGradientBoostingRegressor(max_iter=10, random_state=0).fit(X, y))
    back = Trees.from_arrays(from_bytes(to_bytes(trees.arrays("a_"))), "a_")
    np.testing.assert_array_equal(back.predict(X), trees.predict(X))
    with pytest.raises(ValueError, match="2-D"):
        trees.predict(np.zeros(3))


def _series(days: int = 5) -> LoadSeries:
    t = np.arange(days * 144)
    rng = np.random.default_rng(3)
    run = np.round(40 + 20 * np.sin(2 * np.pi * t / 144) + rng.normal(0, 2, t.size)).clip(0, 64)
    pend = np.round(np.maximum(0, 10 * np.sin(2 * np.pi * t / 144)) + rng.integers(0, 3, t.size))
    return LoadSeries.build("all", 1_700_000_000.0 + 600.0 * t, capacity=np.full(t.size, 64.0),
                            running_gpus=run, pending_gpus=pend)


def test_a_stored_forecaster_forecasts_exactly_as_the_fitted_one() -> None:
    s = _series()
    fitted = DemandForecaster(anchors=(1, 6, 18)).fit([s])
    loaded = DemandForecaster.from_bytes(fitted.to_bytes())
    assert loaded.gate == fitted.gate and loaded.spread == fitted.spread
    assert loaded.fitted_ts == {"all": float(s.ts[-1])} and loaded.anchors == (1, 6, 18)
    a, b = fitted.forecast(s, 18), loaded.forecast(s, 18)
    assert a.method == b.method == "gradient_boosting"
    assert a.targets == b.targets
