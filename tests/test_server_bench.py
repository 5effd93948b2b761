"""`sentinel-bench smd|asd` on tiny datasets written here in the SMD/ASD file format, and its bad-input errors."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sentinel.errors import ValidationError
from sentinel_bench.cli import main as bench_main
from sentinel_bench.server import ServerBenchOptions, run_server_bench
from sentinel_bench.server_data import load_machine
from sentinel_bench.server_evidence import read_interpretation

METRIC_KEYS = {"event_precision", "event_recall", "event_f1", "false_alarms_per_day", "lead_time_mean_s", "pa_f1",
               "train_s", "score_rows_per_s"}
SHIFT = (700, 760)  # test rows where metric m2 jumps: the labelled segment


def _write(path: Path, header: list[str], rows: np.ndarray) -> None:
    with gzip.open(path, "wt") as fh:
        fh.write(",".join(header) + "\n")
        for row in rows:
            fh.write(",".join(f"{v:.6g}" for v in row) + "\n")


def _machine(folder: Path, name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = np.arange(2880 + 1440)[:, None]
    values = 0.5 + 0.2 * np.sin(2 * np.pi * t / 1440 + np.arange(4)) + rng.normal(0, 0.02, (len(t), 4))
    train, test = values[:2880], values[2880:]
    test[SHIFT[0]:SHIFT[1], 2] += 0.3
    labels = np.zeros((len(test), 1))
    labels[SHIFT[0]:SHIFT[1]] = 1
    _write(folder / f"{name}_train.csv.gz", ["m0", "m1", "m2", "m3"], train)
    _write(folder / f"{name}_test.csv.gz", ["m0", "m1", "m2", "m3", "label"], np.hstack([test, labels]))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("server")
    _machine(folder, "node-a", 1)
    _machine(folder, "node-b", 2)
    (folder / "interpretation_label").mkdir()
    (folder / "interpretation_label" / "node-a.txt").write_text(f"{SHIFT[0]}-{SHIFT[1]}:3\n")  # 1-based: m2
    return folder


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sentinel_bench.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_detector_catches_the_injected_level_shift_and_names_the_metric(dataset: Path) -> None:
    result = run_server_bench("smd", dataset, ServerBenchOptions(interval_s=60.0))
    assert result["overall"]["event_recall"] == 1.0 and result["overall"]["segments"] == 2
    for machine in ("node-a", "node-b"):
        hit = [a for a in result["by_machine"][machine]["alerts"] if SHIFT[0] - 30 <= a["row"] < SHIFT[1]]
        assert hit and hit[0]["metrics"][0]["metric"] == "m2"
    assert result["evidence"] == {"segments_judged": 1, "top1_match": 1.0, "top3_match": 1.0}  # node-a only


def test_a_malformed_interpretation_label_is_refused(tmp_path: Path) -> None:
    (tmp_path / "interpretation_label").mkdir()
    (tmp_path / "interpretation_label" / "x.txt").write_text("10-20:0\n")
    with pytest.raises(ValidationError, match=r"x.txt:1: expected 'start-end:dim,dim,...'"):
        read_interpretation(tmp_path, "x", ["m0", "m1"])


def test_cli_json_has_overall_baselines_machines_and_speed(dataset: Path) -> None:
    result = _bench("asd", "--data", str(dataset), "--interval", "1m", "--json")
    assert result.returncode == 0, result.stderr
    assert "node-b (2/2)" in result.stderr  # progress on stderr, JSON alone on stdout
    data = json.loads(result.stdout)
    assert set(data["overall"]) >= METRIC_KEYS
    assert set(data["baselines"]["threshold"]) >= METRIC_KEYS and set(data["baselines"]["iforest"]) >= METRIC_KEYS
    assert set(data["by_machine"]) == {"node-a", "node-b"}
    assert data["overall"]["score_rows_per_s"] > 0 and data["interval_s"] == 60.0 and data["horizon_s"] == 1800.0
    lomo = data["lomo"]  # the leave-one-machine-out score beside the usual one, for Sentinel and each baseline
    assert 0.0 <= lomo["event_f1"] <= 1.0 and set(lomo["choices"]) == {"node-a", "node-b"}
    assert {"event_f1"} <= set(lomo["baselines"]["threshold"]) and {"event_f1"} <= set(lomo["baselines"]["iforest"])
    assert set(data["groups"]) == {"node"} and lomo["candidates"]["sentinel"] > 1


def test_cli_scores_settings_chosen_on_another_folder(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["smd", "--data", str(dataset), "--choose-on", str(dataset), "--choose-on-interval", "1m"]) == 0
    table = capsys.readouterr().out
    assert f"chosen on {dataset} only: event F1 sentinel" in table


def test_cli_table_shows_the_detectors_side_by_side(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["smd", "--data", str(dataset)]) == 0
    table = capsys.readouterr().out
    assert "SENTINEL  THRESHOLD  IFOREST" in table and "node-a" in table


def test_missing_label_column_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "x_train.csv.gz", ["m0", "m1"], np.zeros((5, 2)))
    _write(tmp_path / "x_test.csv.gz", ["m0", "m1"], np.zeros((5, 2)))
    assert bench_main(["smd", "--data", str(tmp_path)]) == 1
    assert "error: " in (err := capsys.readouterr().err) and "x_test.csv.gz: no 'label' column" in err


def test_mismatched_columns_name_the_difference(tmp_path: Path) -> None:
    _write(tmp_path / "x_train.csv.gz", ["m0", "m1", "m2"], np.zeros((5, 3)))
    _write(tmp_path / "x_test.csv.gz", ["m0", "m1", "label"], np.zeros((5, 3)))
    with pytest.raises(ValidationError, match=r"train and test metrics differ \(only in train: \['m2'\]"):
        load_machine(tmp_path, "x")


@pytest.mark.parametrize(("files", "message"), [
    ({}, "no <machine>_train.csv.gz files"),
    ({"x_train.csv.gz": "m0\n1\n"}, "no test file for x"),
    ({"x_train.csv.gz": "m0,m1\n1,2\n3,4\n", "x_test.csv.gz": "m0,m1,label\n1,oops,0\n"}, "not numeric CSV"),
    ({"x_train.csv.gz": "m0\n1\n2\n", "x_test.csv.gz": "m0,label\n1,2\n"}, "'label' must be 0 or 1"),
])
def test_bad_folders_are_refused_with_the_reason(tmp_path: Path, files: dict[str, str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for name, text in files.items():
        with gzip.open(tmp_path / name, "wt") as fh:
            fh.write(text)
    assert bench_main(["asd", "--data", str(tmp_path)]) == 1
    assert message in capsys.readouterr().err


def test_a_folder_that_does_not_exist_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["smd", "--data", "/nonexistent/smd"]) == 1
    assert "not a folder" in capsys.readouterr().err
