"""`sentinel sim export` -> `sentinel train` -> `sentinel model list|show` -> `sentinel-bench detect --model`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sentinel_models.features import FEATURES


def sentinel(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sentinel.cli", *args], capture_output=True, text=True, timeout=300)


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sentinel_bench.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_a_model_trained_on_an_export_is_listed_shown_and_scores_a_scenario(tmp_path: Path) -> None:
    export, models = tmp_path / "export", tmp_path / "models"
    done = sentinel("sim", "export", "smoke", "--out", str(export), "--max-steps", "1800")
    assert done.returncode == 0, done.stderr
    done = sentinel("train", "--data", str(export), "--models-dir", str(models), "--name", "t1", "--horizon", "1h",
                    "-o", "json")
    assert done.returncode == 0, done.stderr
    trained = json.loads(done.stdout)
    assert trained["model"] == "t1" and trained["positive_rows"] > 0 and 0 < trained["threshold"] < 1
    listed = json.loads(sentinel("model", "list", "--models-dir", str(models), "-o", "json").stdout)
    assert [(m["name"], m["in_use"]) for m in listed] == [("shipped", True), ("t1", False)]
    shown = json.loads(sentinel("model", "show", "latest", "--models-dir", str(models), "-o", "json").stdout)
    assert shown["features"] == list(FEATURES) and shown["horizon_s"] == 3600.0
    assert len(shown["training"]["data_hash"]) == 64
    done = bench("detect", "--scenario", "smoke", "--max-steps", "1800", "--max-fraction", "1",
                    "--model", str(models / "t1"), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["model"]["name"] == "t1" and result["model"]["rows_scored"] > 0
    assert result["with_precursor"]["faults"] > 0 and "share_within_20s" in result["stragglers"]
    done = bench("calibration", "--scenario", "smoke", "--max-steps", "1800", "--model",
                    str(models / "t1"), "--json")
    assert done.returncode == 0, done.stderr
    calibration = json.loads(done.stdout)
    assert calibration["positive_rows"] > 0 and 0 <= calibration["ece"] <= 1
    assert sum(b["rows"] for b in calibration["bins"]) == calibration["rows"]
    assert all(b["from"] <= b["predicted"] <= b["to"] and 0 <= b["observed"] <= 1 for b in calibration["bins"])


def test_with_the_default_config_list_and_status_name_the_shipped_model(tmp_path: Path) -> None:
    listed = json.loads(sentinel("model", "list", "--models-dir", str(tmp_path / "none"), "-o", "json").stdout)
    assert [(m["name"], m["in_use"], m["verified"]) for m in listed] == [("shipped", True, "ok")]
    store = f"sqlite:///{tmp_path / 's.db'}"
    (tmp_path / "c.toml").write_text(f'[store]\nurl = "{store}"\n')
    sentinel("--config", str(tmp_path / "c.toml"), "db", "upgrade")
    status = json.loads(sentinel("--config", str(tmp_path / "c.toml"), "status", "-o", "json").stdout)
    assert status["hazard_model"] == "shipped" and status["hazard_model_verified"] == "ok"
    (tmp_path / "c.toml").write_text(f'[store]\nurl = "{store}"\n[detector.hazard]\nmodel = ""\n')
    status = json.loads(sentinel("--config", str(tmp_path / "c.toml"), "status", "-o", "json").stdout)
    assert status["hazard_model"] == "rules only"


def test_training_on_a_folder_that_is_not_an_export_fails_clearly(tmp_path: Path) -> None:
    done = sentinel("train", "--data", str(tmp_path), "--models-dir", str(tmp_path / "m"))
    assert done.returncode == 1
    assert "not a training export" in done.stderr and "sentinel sim export" in done.stderr
