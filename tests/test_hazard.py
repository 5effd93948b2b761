"""The hazard model: threshold choice, fitting, persistence, training rows, and scoring inside the detector."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from sentinel.config import from_mapping
from sentinel.detector.hazard_scoring import HazardScorer
from sentinel.detector.sample_view import view_of
from sentinel.detector.windows import NodeWindow
from sentinel.errors import ConfigError
from sentinel.events import FindingClass, GpuReading, Recommendation, Severity, TelemetrySample
from sentinel_models import persistence
from sentinel_models.features import FEATURES
from sentinel_models.hazard import HazardModel, choose_threshold, fit
from sentinel_models.training import Dataset, Failure, build_dataset

ECC = FEATURES.index("ecc_sbe_per_h")


def test_threshold_is_the_lowest_score_that_keeps_the_target_precision() -> None:
    p = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    y = np.array([1, 1, 0, 1, 0])
    threshold, precision, recall = choose_threshold(p, y, np.ones(5), 0.75)
    assert (threshold, precision, recall) == (0.6, 0.75, 1.0)
    assert choose_threshold(p, y, np.ones(5), 1.0) == (0.8, 1.0, 2 / 3)


def test_threshold_counts_subsampled_healthy_rows_with_their_weight() -> None:
    p, y = np.array([0.9, 0.8]), np.array([1, 0])
    assert choose_threshold(p, y, np.array([1.0, 50.0]), 0.9)[0] == 0.9  # one kept healthy row stands for 50


def _synthetic(seed: int = 0, rows: int = 3000) -> Dataset:
    rng = np.random.default_rng(seed)
    y = (rng.random(rows) < 0.2).astype(np.int8)
    x = rng.normal(0.0, 1.0, (rows, len(FEATURES)))
    x[:, ECC] = np.where(y == 1, rng.uniform(50, 500, rows), rng.uniform(0, 5, rows))
    return Dataset(x, y, np.ones(rows), rng.integers(0, 40, rows), np.zeros(rows))


@pytest.fixture(scope="module")
def model() -> HazardModel:
    return fit(_synthetic(), horizon_s=3600.0, target_precision=0.95)


def test_a_fitted_model_separates_rising_ecc_from_healthy_rows(model: HazardModel) -> None:
    test = _synthetic(seed=1, rows=500)
    p = model.probability(test.x)
    assert p[test.y == 1].min() > 0.9 and np.quantile(p[test.y == 0], 0.99) < 0.1
    assert model.report["validation"]["precision"] >= 0.95
    assert "ecc_sbe_per_h" in model.unusual(test.x[np.flatnonzero(test.y)[0]])


def test_saved_models_load_list_and_resolve(tmp_path: Path, model: HazardModel) -> None:
    directory = persistence.save(model, tmp_path, "m1", "abc", "synthetic")
    loaded = persistence.load(directory)
    x = _synthetic(seed=2, rows=50).x
    np.testing.assert_allclose(loaded.probability(x), model.probability(x))
    assert [m["name"] for m in persistence.list_models(tmp_path)] == ["m1"]
    assert persistence.resolve("latest", tmp_path) == directory == persistence.resolve("m1", tmp_path)
    meta = persistence.metadata(directory)
    assert meta["features"] == list(FEATURES) and meta["training"]["data_hash"] == "abc"
    with pytest.raises(ConfigError, match="already exists"):
        persistence.save(model, tmp_path, "m1", "abc", "synthetic")


def test_a_model_file_others_can_write_is_refused(tmp_path: Path, model: HazardModel) -> None:
    directory = persistence.save(model, tmp_path, "m1", "abc", "synthetic")
    os.chmod(directory / persistence.MODEL_FILE, 0o666)
    with pytest.raises(ConfigError, match="writable by group or others"):
        persistence.load(directory)


def test_a_model_trained_on_other_features_is_refused(tmp_path: Path, model: HazardModel) -> None:
    directory = persistence.save(model, tmp_path, "m1", "abc", "synthetic")
    meta = (directory / persistence.META_FILE).read_text().replace('"node_temp_c"', '"node_temp_k"')
    (directory / persistence.META_FILE).write_text(meta)
    with pytest.raises(ConfigError, match="other features"):
        persistence.load(directory)


def _step(t: float, n: int = 2, g: int = 2, sbe: float = 0.0, lost: bool = False) -> dict:
    full = np.full((n, g), 1.0)
    step = {name: full * v for name, v in (("temp_c", 60.0), ("power_w", 500.0), ("sm_clock_mhz", 1980.0),
                                             ("util_pct", 90.0), ("pcie_replay", 0.0), ("nvlink_crc", 0.0),
                                             ("nvlink_replay", 0.0), ("remap_pending", 0.0), ("pcie_downtrained", 0.0))}
    step["ecc_sbe"] = full * 0.0
    step["ecc_sbe"][0, 1] = sbe
    step["throttle"] = np.zeros((n, g), np.int64)
    step["lost"] = np.zeros((n, g), bool)
    step["lost"][1, 0] = lost
    for name in ("ib_symbol_error", "ib_link_error_recovery", "ib_link_downed"):
        step[name] = np.zeros(n)
    return step | {"t_s": t, "logs": []}


def test_training_rows_label_the_horizon_and_skip_lost_gpus_and_failed_nodes() -> None:
    steps = [_step(10.0 * k, sbe=5.0 * k, lost=k >= 3) for k in range(8)]
    failures = [Failure(node=0, gpu=1, failure_s=60.0)]
    data = build_dataset(steps, failures, window=3, stride=1, horizon_s=30.0, negative_share=1.0)
    rows = {(int(n), float(t)): [] for n, t in zip(data.node, data.t_s, strict=True)}
    for n, t, y in zip(data.node, data.t_s, data.y, strict=True):
        rows[(int(n), float(t))].append(int(y))
    assert sorted(t for (n, t) in rows if n == 0) == [20.0, 30.0, 40.0, 50.0]  # node 0 failed at 60 s
    assert rows[(0, 20.0)] == [0, 0] and rows[(0, 30.0)] == [0, 1] and rows[(0, 50.0)] == [0, 1]
    assert rows[(1, 20.0)] == [0, 0] and rows[(1, 30.0)] == [0]  # GPU 0 of node 1 lost from 30 s
    assert data.x.shape[1] == len(FEATURES)


def _score_rising_ecc(model: HazardModel, pending_from: int | None, alert_consecutive: int = 2) -> list:
    """40 samples 10 s apart; GPU 1's correctable ECC climbs from the 20th; a row remap goes pending from
    ``pending_from`` (never when None). Returns the hazard findings."""
    config = from_mapping({"detector": {"hazard": {"score_interval_s": 60, "consecutive": 2,
                                                   "alert_consecutive": alert_consecutive}}}).detector.hazard
    scorer = HazardScorer(model, config, "synthetic")
    window = NodeWindow(10, gpus=2)
    findings = []
    for k in range(40):
        pending = pending_from is not None and k >= pending_from
        gpus = [GpuReading(index=i, temp_c=60.0, power_w=500.0, sm_clock_mhz=1980.0, util_gpu_pct=90.0,
                           ecc_sbe_volatile=(30 * k if i == 1 and k >= 20 else 0),
                           row_remap_pending=pending and i == 1) for i in range(2)]
        window.push(view_of(TelemetrySample(node="n1", ts=10.0 * k, gpus=gpus)))
        findings += scorer.score({"n1": window}, ["n1"], 10.0 * k)
    return [f for f in findings if f.kind is FindingClass.PREDICTED_FAILURE]


def test_the_scorer_reports_a_gpu_after_consecutive_high_scorings_once(model: HazardModel) -> None:
    hazard = _score_rising_ecc(model, pending_from=20)
    # scored from the 5th sample, then once per 60 s slot (40, 60, 120, ..., 240, 300); ECC rises from 200 s:
    # high at 240 and 300
    assert [(f.gpu_index, f.observed_ts) for f in hazard] == [(1, 300.0)]
    [finding] = hazard
    assert finding.recommendation is Recommendation.CHECKPOINT_DRAIN and finding.evidence["physical_evidence"]
    assert finding.evidence["model"] == "synthetic" and finding.confidence >= finding.evidence["threshold"]
    assert "feature.ecc_sbe_per_h" in finding.evidence


def test_a_prediction_without_a_second_physical_signal_only_alerts(model: HazardModel) -> None:
    [finding] = _score_rising_ecc(model, pending_from=None)  # correctable errors, but no remap: could recover
    assert finding.recommendation is Recommendation.ALERT and finding.severity is Severity.WARNING
    assert finding.evidence["physical_evidence"] is False


def test_an_alert_only_prediction_must_persist_longer_than_a_drain(model: HazardModel) -> None:
    assert _score_rising_ecc(model, pending_from=None, alert_consecutive=4) == []  # 2 high scorings: too short
    assert len(_score_rising_ecc(model, pending_from=20, alert_consecutive=4)) == 1  # two signals: 2 suffice


def test_an_alerted_prediction_escalates_to_a_drain_when_the_evidence_arrives(model: HazardModel) -> None:
    hazard = _score_rising_ecc(model, pending_from=31)
    assert [(f.recommendation, f.observed_ts) for f in hazard] == [(Recommendation.ALERT, 300.0),
                                                                   (Recommendation.CHECKPOINT_DRAIN, 360.0)]


def test_the_scorer_keeps_each_gpus_deviation_baseline_across_scorings(model: HazardModel) -> None:
    config = from_mapping({"detector": {"hazard": {"score_interval_s": 60}}}).detector.hazard
    scorer = HazardScorer(model, config, "synthetic")
    window = NodeWindow(10, gpus=3)
    for k in range(20):
        gpus = [GpuReading(index=i, temp_c=66.0 if i == 2 else 60.0, power_w=530.0 if i == 2 else 500.0,
                           sm_clock_mhz=1980.0, util_gpu_pct=90.0, ecc_sbe_volatile=0) for i in range(3)]
        window.push(view_of(TelemetrySample(node="n1", ts=10.0 * k, gpus=gpus)))
        scorer.score({"n1": window}, ["n1"], 10.0 * k)
    baseline = scorer.baselines["n1"]
    # GPU 2 always runs 6 C and 30 W above the median of its peers: that is its baseline, not an excess
    assert baseline.value is not None and baseline.value.tolist() == [[0.0, 0.0], [0.0, 0.0], [6.0, 30.0]]
    assert baseline.ts == 180.0  # the last scoring (40, 60, 120, 180 s: one per 60 s slot)


def test_the_fast_probability_and_anomaly_paths_give_scikit_learns_numbers(model: HazardModel) -> None:
    rows = np.random.default_rng(5).normal(size=(40, len(FEATURES))) * 5
    rows[3, 2] = np.nan
    clean = np.nan_to_num(rows, nan=0.0)
    np.testing.assert_allclose(model.probability(rows), model.classifier.predict_proba(clean)[:, 1], rtol=1e-12)
    np.testing.assert_allclose(model.anomaly_score(rows), -model.anomaly.score_samples(clean), rtol=1e-12)
