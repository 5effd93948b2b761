"""Quantile scores, the empirical-change baseline and the calibrated quantile model, with literals."""

from __future__ import annotations

import numpy as np
import pytest

from sentinel_models.forecast_quantiles import QuantileModel, Rows
from sentinel_models.quantile_scores import change_quantiles, coverage, interval_score, pinball, shifted


def test_pinball_is_zero_for_a_perfect_forecast_and_weights_misses_by_quantile() -> None:
    y = np.array([5.0])
    assert pinball(y, np.array([[5.0, 5.0, 5.0]])) == 0.0
    # truth 10 above all three: misses of 5 weighted 0.1, 0.5, 0.9 -> mean 2.5
    assert pinball(np.array([10.0]), np.array([[5.0, 5.0, 5.0]])) == pytest.approx(2.5)
    # truth 0 below all three: weights 0.9, 0.5, 0.1 -> mean 2.5 as well
    assert pinball(np.array([0.0]), np.array([[5.0, 5.0, 5.0]])) == pytest.approx(2.5)


def test_interval_score_is_the_width_plus_ten_times_the_miss() -> None:
    q = np.array([[2.0, 4.0, 6.0], [2.0, 4.0, 6.0]])
    assert interval_score(np.array([3.0, 3.0]), q) == pytest.approx(4.0)
    assert interval_score(np.array([7.0, 7.0]), q) == pytest.approx(4.0 + 10.0 * 1.0)


def test_coverage_counts_truths_on_the_bounds_as_inside() -> None:
    q = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    assert coverage(np.array([0.0, 3.0, 3.5]), q) == pytest.approx(2 / 3)


def test_change_quantiles_use_only_the_bins_before_the_end() -> None:
    y = np.array([0.0, 1.0, 2.0, 3.0, 100.0, 200.0])
    assert change_quantiles(y, 1, end=4).tolist() == [1.0, 1.0, 1.0]  # the jump after bin 3 is not seen
    assert shifted(np.array([0.5]), np.array([-1.0, 0.0, 2.0])).tolist() == [[0.0, 0.5, 2.5]]


def _rows(rng: np.random.Generator, n: int, with_truth: bool = True) -> Rows:
    x = rng.uniform(-1, 1, (n, 2))
    level = np.full(n, 50.0)
    truth = level + 10 * x[:, 0] + rng.normal(0, 3, n)  # the change follows feature 0, plus noise
    return Rows(np.arange(n), x, level, np.full(n, 10.0), shifted(level, np.quantile(truth - level, [.1, .5, .9])),
                truth if with_truth else None)


def test_quantile_model_learns_the_change_and_covers_about_80_percent_of_new_rows() -> None:
    rng = np.random.default_rng(0)
    model = QuantileModel({"max_iter": 40}).fit([_rows(rng, 3000)])
    test = _rows(rng, 2000)
    q = model.predict(Rows(test.order, test.X, test.level, test.scale, test.base))
    assert model.blend > 0.5  # the features explain most of the change: the model beats the unconditional base
    assert pinball(test.truth, q) < 0.6 * pinball(test.truth, test.base)
    assert 0.74 <= coverage(test.truth, q) <= 0.86
    assert (np.diff(q, axis=1) >= 0).all() and (q >= 0).all()


def test_quantile_model_refuses_rows_without_truth() -> None:
    rows = _rows(np.random.default_rng(1), 50, with_truth=False)
    with pytest.raises(ValueError, match="without truth"):
        QuantileModel().fit([rows])


def _cluster(rng: np.random.Generator, n: int, slope: float, noise: float, name: float = 0.0) -> Rows:
    """Rows of one cluster whose change follows feature 0 with its own slope; feature 1 tells the cluster."""
    x = np.column_stack([rng.uniform(-1, 1, n), np.full(n, name)])
    level = np.full(n, 50.0)
    truth = level + slope * x[:, 0] + rng.normal(0, noise, n)
    return Rows(np.arange(n), x, level, np.full(n, 10.0), shifted(level, np.quantile(truth - level, [.1, .5, .9])),
                truth)


def test_with_several_clusters_blend_and_width_are_chosen_on_clusters_held_out() -> None:
    """Each cluster's change has its own sign, told by a feature that names the cluster: judged on later rows
    of the same clusters the model is excellent, on a cluster it was not fitted on it is wrong. The calibration
    across clusters sees that and keeps the baseline (the old one, on the newest rows, trusted the model)."""
    rng = np.random.default_rng(2)
    parts = [_cluster(rng, 600, slope, 1.0, name) for name, slope in enumerate((12.0, -12.0, 12.0, -12.0))]
    across = QuantileModel({"max_iter": 30}).fit(parts)
    assert across.blend == 0.0 and across.widen == 1.0
    test = _cluster(rng, 500, 12.0, 1.0, 4.0)  # a new cluster
    q = across.predict(Rows(test.order, test.X, test.level, test.scale, test.base))
    assert np.allclose(q, test.base)


def test_calibration_across_clusters_keeps_a_model_that_carries_over() -> None:
    rng = np.random.default_rng(3)
    model = QuantileModel({"max_iter": 30}).fit([_cluster(rng, 600, 10.0, 3.0, i) for i in range(3)])
    assert model.blend > 0.5
    test = _cluster(rng, 1500, 10.0, 3.0, 3.0)
    q = model.predict(Rows(test.order, test.X, test.level, test.scale, test.base))
    assert pinball(test.truth, q) < 0.7 * pinball(test.truth, test.base)
    assert 0.74 <= coverage(test.truth, q) <= 0.86


def test_a_fitted_model_round_trips_through_numpy_arrays_without_pickle() -> None:
    from sentinel_models.forecast_trees import from_bytes, to_bytes

    rng = np.random.default_rng(4)
    model = QuantileModel({"max_iter": 20}).fit([_rows(rng, 800)])
    model.blend, model.widen = 0.75, 1.25  # whatever was chosen travels with the trees
    back = QuantileModel.from_arrays(from_bytes(to_bytes(model.arrays("q_"))), "q_")
    test = _rows(rng, 300, with_truth=False)
    assert (back.blend, back.widen) == (0.75, 1.25)
    assert np.array_equal(back.predict(test), model.predict(test))


def test_when_the_baseline_is_kept_its_width_is_calibrated_too() -> None:
    """The clusters disagree, so the model is not trusted over the baseline; the baseline itself is twice too
    wide (its 2-98 % range stands for 10-90 %), and its width is narrowed toward 80 % coverage."""
    rng = np.random.default_rng(5)

    def wide(rows: Rows) -> Rows:
        base = shifted(rows.level, np.quantile(_truth_of(rows) - rows.level, [.02, .5, .98]))
        return Rows(rows.order, rows.X, rows.level, rows.scale, base, rows.truth)

    parts = [wide(_cluster(rng, 600, slope, 1.0, name)) for name, slope in enumerate((12.0, -12.0, 12.0, -12.0))]
    model = QuantileModel({"max_iter": 30}).fit(parts)
    assert model.blend == 0.0 and model.widen < 1.0
    test = wide(_cluster(rng, 1500, 12.0, 1.0, 4.0))
    q = model.predict(Rows(test.order, test.X, test.level, test.scale, test.base))
    assert coverage(_truth_of(test), test.base) > 0.9
    assert 0.74 <= coverage(_truth_of(test), q) <= 0.86
    assert pinball(_truth_of(test), q) < pinball(_truth_of(test), test.base)


def _truth_of(rows: Rows) -> np.ndarray:
    assert rows.truth is not None
    return rows.truth
