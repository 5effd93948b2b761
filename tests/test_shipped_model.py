"""The hazard model the wheel ships: on by default, verified by the SHA-256 pinned in the package's code (no site
key needed), a tampered packaged file refused, the recipe that made it matching this code, and a cold start on a
fleet it has never seen draining nothing on the model's word alone."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from sentinel.actuator.signing import write_key
from sentinel.config import from_mapping
from sentinel.daemon import model_keys
from sentinel.detector.hazard_scoring import HazardScorer, load_scorer
from sentinel.detector.sample_view import view_of
from sentinel.detector.windows import NodeWindow
from sentinel.errors import ModelRefused
from sentinel.events import GpuReading, Recommendation, TelemetrySample
from sentinel.sim import trainset
from sentinel_models import persistence, shipped


def test_the_packaged_files_match_the_sha256_pinned_in_the_code() -> None:
    for name, pinned in shipped.PINNED_SHA256.items():
        assert hashlib.sha256((shipped.DIRECTORY / name).read_bytes()).hexdigest() == pinned


def test_the_default_config_loads_the_shipped_model_verified_with_no_key() -> None:
    config = from_mapping({})
    assert config.detector.hazard.model == "shipped"
    scorer = load_scorer(config.detector.hazard, model_keys(config))
    assert scorer is not None and scorer.name == "shipped"


def test_a_site_key_does_not_refuse_the_shipped_model_but_still_refuses_unsigned_site_models(
        tmp_path: Path) -> None:
    key = tmp_path / "sentinel.key"
    write_key(str(key))
    config = from_mapping({"security": {"key_file": str(key)}})
    assert load_scorer(config.detector.hazard, model_keys(config)) is not None
    site = tmp_path / "site-model"
    shutil.copytree(shipped.DIRECTORY, site)
    with pytest.raises(ModelRefused, match="model.sig"):
        persistence.verify(site, model_keys(config))


@pytest.mark.parametrize("name", ["model.json", "model.joblib"])
def test_a_tampered_packaged_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    packaged = tmp_path / "site-packages" / "sentinel_models" / "shipped" / "hazard"
    shutil.copytree(shipped.DIRECTORY, packaged)
    monkeypatch.setattr(shipped, "DIRECTORY", packaged.resolve())  # where this install's package lies
    persistence.verify(packaged)  # the copy is the packaged model, byte for byte
    path = packaged / name
    if name == "model.json":  # a lower threshold: the model would flag more
        path.write_text(path.read_text().replace('"threshold": 0.', '"threshold": 0.0', 1))
    else:
        data = bytearray(path.read_bytes())
        data[-2] ^= 1
        path.write_bytes(bytes(data))
    with pytest.raises(ModelRefused, match="pins"):
        persistence.verify(packaged)
    with pytest.raises(ModelRefused):
        load_scorer(from_mapping({}).detector.hazard)


def test_the_shipped_model_records_its_recipe_and_the_recipe_matches_this_code() -> None:
    """A change to the simulator, the features or the training code needs `make model` (the shipped model is then
    retrained by its recipe and its pins rewritten); this test says so."""
    recipe = persistence.metadata(shipped.DIRECTORY)["recipe"]
    assert recipe["command"] == "sentinel train --recipe shipped" and recipe["scenario"] == "train"
    assert len(recipe["fleets"]) == trainset.SHIFTED_FLEETS and all("seed" in f for f in recipe["fleets"])
    assert recipe["digest"] == trainset.recipe_digest(), "the shipped model is stale: run `make model`"


def test_on_a_fleet_it_never_saw_the_model_alone_drains_nothing() -> None:
    """Cold start: no deviation baseline, no fleet spread yet. A GPU that runs hot and hungry against its peers from
    its first sample, with PCIe replays climbing, is at most an alert: a drain needs two physical signals."""
    model = persistence.load(shipped.DIRECTORY)
    scorer = HazardScorer(model, from_mapping({}).detector.hazard, "shipped")
    window = NodeWindow(60, gpus=8)
    findings = []
    for k in range(6 * 360):  # six hours at 10 s
        gpus = [GpuReading(index=i, temp_c=82.0 if i == 3 else 66.0, power_w=690.0 if i == 3 else 600.0,
                           sm_clock_mhz=1980.0, util_gpu_pct=96.0, pcie_replay=(k * k // 50 if i == 3 else 0),
                           ecc_sbe_volatile=0) for i in range(8)]
        window.push(view_of(TelemetrySample(node="fresh-node", ts=10.0 * k, gpus=gpus)))
        findings += scorer.score({"fresh-node": window}, ["fresh-node"], 10.0 * k)
    assert scorer.rows_scored > 0
    assert not [f for f in findings if f.recommendation in (Recommendation.CHECKPOINT_DRAIN, Recommendation.DRAIN)]
