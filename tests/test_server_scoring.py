"""Event-level scoring of server-telemetry alerts, with literals: hits, lead time, false alarms, point-adjust."""

from __future__ import annotations

import numpy as np
import pytest

from sentinel_bench.server_scoring import Counts, score_events, segments
from sentinel_models.server_alerts import alert_onsets, budget_threshold


def _labels(n: int, *segs: tuple[int, int]) -> np.ndarray:
    labels = np.zeros(n, dtype=np.int8)
    for start, end in segs:
        labels[start:end] = 1
    return labels


def test_segments_are_contiguous_label_runs_half_open() -> None:
    assert segments([0, 1, 1, 0, 1]) == [(1, 3), (4, 5)]
    assert segments([1, 0, 0]) == [(0, 1)]
    assert segments([0, 0]) == []


def test_alert_hits_count_from_start_minus_horizon_to_end_exclusive() -> None:
    labels = _labels(100, (10, 20))
    no_exceed = np.zeros(100, dtype=bool)
    # horizon 5 rows: window [5, 20)
    assert score_events([5], labels, no_exceed, 60.0, 5).hit_alerts == 1
    assert score_events([19], labels, no_exceed, 60.0, 5).hit_alerts == 1
    assert score_events([4], labels, no_exceed, 60.0, 5).hit_alerts == 0
    assert score_events([20], labels, no_exceed, 60.0, 5).hit_alerts == 0


def test_precision_recall_f1_false_alarms_and_lead_time() -> None:
    labels = _labels(100, (10, 20), (40, 45))
    counts = score_events([7, 12, 30, 60], labels, np.zeros(100, dtype=bool), 60.0, 5)
    m = counts.metrics()
    assert (m["alerts"], m["false_alarms"], m["segments"], m["detected"]) == (4, 2, 2, 1)
    assert m["event_precision"] == 0.5 and m["event_recall"] == 0.5 and m["event_f1"] == 0.5
    assert m["false_alarms_per_day"] == 28.8  # 2 false alarms in 100 minutes = 6000 s
    assert m["lead_time_mean_s"] == 180.0  # first hit 3 rows of 60 s before the start
    assert m["detected_early"] == 1 and m["detection_delay_mean_s"] == 0.0


def test_lead_time_is_zero_when_the_first_alert_is_inside_the_segment() -> None:
    m = score_events([15, 17], _labels(50, (10, 20)), np.zeros(50, dtype=bool), 300.0, 6).metrics()
    assert m["lead_time_mean_s"] == 0.0 and m["detected_early"] == 0 and m["event_precision"] == 1.0
    assert m["detection_delay_mean_s"] == 1500.0  # 5 rows of 300 s after the start


def test_no_alerts_means_zero_precision_and_no_lead_time() -> None:
    m = score_events([], _labels(50, (10, 20)), np.zeros(50, dtype=bool), 60.0, 5).metrics()
    assert m["event_precision"] == 0.0 and m["event_f1"] == 0.0 and m["lead_time_mean_s"] is None


def test_point_adjust_credits_the_whole_segment_for_one_exceeding_row() -> None:
    labels = _labels(100, (10, 20), (40, 45))
    exceed = np.zeros(100, dtype=bool)
    exceed[[15, 30]] = True
    counts = score_events([], labels, exceed, 60.0, 5)
    assert (counts.pa_tp, counts.pa_fp, counts.pa_fn) == (10, 1, 5)
    precision, recall = 10 / 11, 10 / 15
    assert counts.metrics()["pa_f1"] == round(2 * precision * recall / (precision + recall), 4)


def test_overall_pools_events_instead_of_averaging_machines() -> None:
    a = score_events([12], _labels(100, (10, 20)), np.zeros(100, dtype=bool), 60.0, 5)  # F1 1.0
    b = score_events([1, 2, 3], _labels(100, (50, 60), (70, 80)), np.zeros(100, dtype=bool), 60.0, 5)  # F1 0
    pooled = (a + b).metrics()
    assert (pooled["alerts"], pooled["false_alarms"], pooled["segments"], pooled["detected"]) == (4, 3, 3, 1)
    assert pooled["event_precision"] == 0.25 and pooled["event_recall"] == 0.3333
    assert pooled["days"] == round(200 * 60 / 86_400, 3)
    assert Counts() + a == a


def test_one_alert_per_exceedance_and_none_within_the_refractory_period() -> None:
    exceed = [0, 1, 1, 0, 1, 0, 0, 0, 1, 1]
    assert alert_onsets(exceed, 3).tolist() == [1, 4, 8]
    assert alert_onsets(exceed, 4).tolist() == [1, 8]
    assert alert_onsets(exceed, 0).tolist() == [1, 4, 8]
    assert alert_onsets([1, 1, 1], 10).tolist() == [0]


def test_budget_threshold_allows_the_stated_training_alerts_per_day() -> None:
    scores = np.zeros(1440)  # one day at 60 s
    scores[[100, 600, 1100]] = [5.0, 4.0, 3.0]
    one = budget_threshold(scores, 60.0, 1.0, refractory_rows=30)
    assert 4.0 <= one < 5.0 and len(alert_onsets(scores > one, 30)) == 1
    two = budget_threshold(scores, 60.0, 2.0, refractory_rows=30)
    assert 3.0 <= two < 4.0
    assert budget_threshold(scores, 60.0, 0.0, refractory_rows=30) == 5.0


def test_a_calibration_shorter_than_one_budgeted_alert_extrapolates_the_tail_beyond_its_largest_score() -> None:
    rng = np.random.default_rng(5)
    per_day, at_max = [], []
    for _ in range(20):
        half_day = rng.exponential(1.0, 720)  # 12 h at 60 s: the budget of 1 a day allows half an alert
        threshold = budget_threshold(half_day, 60.0, 1.0, refractory_rows=30)
        assert threshold >= half_day.max()
        ten_days = rng.exponential(1.0, 14_400)
        per_day.append((ten_days > threshold).sum() / 10)
        at_max.append((ten_days > half_day.max()).sum() / 10)
    assert 0.5 < np.mean(per_day) < 1.5 < np.mean(at_max)  # the largest of 720 is beaten about twice a day


def test_scoring_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="rows"):
        score_events([], np.zeros(5), np.zeros(4, dtype=bool), 60.0, 1)
