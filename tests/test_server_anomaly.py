"""The server-telemetry detector: causal streaming scores, a level shift stands out, evidence names its metric."""

from __future__ import annotations

import numpy as np
import pytest

from sentinel_models.server_alerts import alert_onsets, budget_threshold
from sentinel_models.server_anomaly import ServerAnomalyConfig, ServerAnomalyModel, calibration_scores

COLUMNS = ["cpu", "mem", "disk", "net"]


def _telemetry(rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(rows)[:, None]
    daily = 0.2 * np.sin(2 * np.pi * t / 1440 + np.arange(4))
    return 0.5 + daily + rng.normal(0, 0.02, (rows, 4))


def test_scores_continue_chunk_by_chunk_exactly_as_in_one_pass() -> None:
    model = ServerAnomalyModel.fit(_telemetry(2000, 1), COLUMNS)
    test = _telemetry(600, 2)
    whole, _ = model.score(test)
    first, state = model.score(test[:250])
    rest, _ = model.score(test[250:], state)
    np.testing.assert_allclose(np.concatenate([first.combined, rest.combined]), whole.combined)


def test_a_score_depends_only_on_rows_before_and_at_it() -> None:
    model = ServerAnomalyModel.fit(_telemetry(2000, 1), COLUMNS)
    test = _telemetry(300, 2)
    changed = test.copy()
    changed[200:] += 5.0
    np.testing.assert_array_equal(model.score(test)[0].combined[:200], model.score(changed)[0].combined[:200])


def test_a_level_shift_in_one_metric_raises_one_alert_that_names_it() -> None:
    train, test = _telemetry(2880, 1), _telemetry(1440, 2)
    test[700:760, 2] += 0.3  # the disk metric jumps for an hour
    model = ServerAnomalyModel.fit(train, COLUMNS)
    train_scores, _ = model.score(train, model.cold_start(train[0]))
    threshold = budget_threshold(train_scores.combined, 60.0, 1.0, refractory_rows=30)
    scores, _ = model.score(test)
    onsets = alert_onsets(scores.combined > threshold, 30)
    assert 700 in onsets.tolist()
    elsewhere = [r for r in onsets.tolist() if not 670 <= r < 790]
    assert len(elsewhere) <= 4  # a budget of 1 training alert a day: pure noise still crosses now and then
    top = model.explain(test, scores, 700)[0]
    assert top.metric == "disk" and top.value == pytest.approx(test[700, 2])
    assert top.expected == pytest.approx(test[699, 2], abs=0.1) and top.score > 1.0


def test_constant_training_metric_does_not_divide_by_zero() -> None:
    train = _telemetry(500, 1)
    train[:, 0] = 0.0
    scores, _ = ServerAnomalyModel.fit(train, COLUMNS).score(_telemetry(50, 2))
    assert np.isfinite(scores.combined).all()


def test_calibration_scores_come_from_rows_the_calibration_model_did_not_fit() -> None:
    train = _telemetry(2000, 1)
    train[1000:, 1] += np.linspace(0, 0.5, 1000)  # the second half drifts: in-sample scores hide it
    holdout = calibration_scores(train, COLUMNS)
    in_sample = calibration_scores(train, COLUMNS, ServerAnomalyConfig(calibration_split=0.0))
    assert len(holdout) == 1000 and len(in_sample) == 2000
    assert np.quantile(holdout, 0.99) > np.quantile(in_sample, 0.99)


def test_too_few_rows_to_split_calibrate_in_sample() -> None:
    assert len(calibration_scores(_telemetry(40, 1), COLUMNS)) == 40


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"alpha": 0.0}, "alpha"), ({"top_k": 0}, "top_k"), ({"tail_quantile": 0.2}, "tail_quantile"),
    ({"calibration_split": 1.0}, "calibration_split"),
])
def test_bad_config_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServerAnomalyConfig(**kwargs)  # type: ignore[arg-type]


def test_rows_of_the_wrong_width_or_with_nan_are_refused() -> None:
    model = ServerAnomalyModel.fit(_telemetry(100, 1), COLUMNS)
    with pytest.raises(ValueError, match="4 metrics"):
        model.score(np.zeros((3, 5)))
    bad = _telemetry(3, 2)
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.score(bad)
