"""The aggregate-bin baseline: persistence with the series' own change, mixed with the series' own levels."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel_models.load_prior import LoadPrior, choose_weight
from sentinel_models.quantile_scores import QUANTILES, change_quantiles, shifted


def _brute(level: float, changes: np.ndarray, levels: np.ndarray, w: float) -> list[float]:
    """Quantiles of the mixture from its whole distribution function, value by value."""
    values = np.unique(np.concatenate([level + changes, levels]))
    cdf = [w * np.mean(level + changes <= v) + (1 - w) * np.mean(levels <= v) for v in values]
    return [max(float(values[np.searchsorted(cdf, q - 1e-9)]), 0.0) for q in QUANTILES]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=8, max_size=60), st.sampled_from([0.0, 0.2, 0.5, 0.9]),
       st.integers(1, 5))
def test_the_quantiles_are_those_of_the_mixture(y: list[int], w: float, h: int) -> None:
    series = np.array(y, dtype=float)
    prior = LoadPrior.of(series, h, weight=w)
    levels = np.array([0.0, 7.0, 33.0])
    got = prior.quantiles(levels)
    for row, level in zip(got, levels, strict=True):
        assert np.allclose(row, _brute(level, prior.changes, prior.levels, w), atol=1e-6)


def test_weight_one_is_the_last_baseline_and_only_bins_before_the_end_count() -> None:
    y = np.array([3, 4, 4, 6, 5, 9, 30, 31], dtype=float)
    prior = LoadPrior.of(y, 2, end=6)
    assert prior.levels.max() == 9  # the jump after bin 5 is not seen
    level = np.array([5.0, 0.0])
    assert np.array_equal(prior.quantiles(level), shifted(level, change_quantiles(y, 2, 6)))


def test_a_day_ahead_a_series_that_returns_to_its_levels_mixes_them_in_and_a_random_walk_does_not() -> None:
    rng = np.random.default_rng(1)
    # fluctuates around 50 with no memory beyond a few bins: the value now says little a day ahead
    noise = rng.normal(0, 10, 3000)
    y = np.round(50 + np.convolve(noise, np.ones(3) / 3, mode="same"))
    assert choose_weight([y], 144) == 0.9
    # a random walk: the value now is the best guess whatever the horizon
    walk = np.cumsum(rng.choice([-1.0, 0.0, 1.0], 3000)) + 500
    assert choose_weight([walk], 6) == 1.0


def test_a_series_too_short_to_judge_keeps_persistence_and_nan_bins_are_ignored() -> None:
    assert choose_weight([np.arange(10.0)], 144) == 1.0
    y = np.array([1.0, np.nan, 2.0, 3.0, 2.0])
    prior = LoadPrior.of(y, 1, weight=0.5)
    assert np.isfinite(prior.changes).all() and np.isfinite(prior.levels).all()
    assert np.isfinite(prior.quantiles(np.array([2.0]))).all()


def test_a_training_run_gets_the_prior_of_the_bins_outside_it_never_the_change_across_the_gap() -> None:
    y = np.array([0.0] * 10 + [100.0] * 10 + [5.0] * 10)
    prior = LoadPrior.outside(y, 1, 10, 20, weight=0.5)
    assert set(prior.levels) == {0.0, 5.0}  # the run's own levels (100) are not in it
    assert set(prior.changes) == {0.0}  # 0 -> 5 across the gap is not a change the series made
    runs = LoadPrior.blocks(np.arange(3, 27), 3)
    assert np.array_equal(np.concatenate([k for k, _, _ in runs]), np.arange(3, 27))
    for k, lo, hi in runs:  # each run's span holds its origins and their truths
        assert lo == k[0] and hi == k[-1] + 3 + 1
