"""sentinel-bench forecast on a tiny generated folder in the Helios format (written here, not committed)."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sentinel_bench.cli import main as bench_main
from sentinel_bench.forecast import run_forecast_bench, smape

HEADER = ("time,total_job_num,running_job_num,pending_job_num,total_gpu_num,running_gpu_num,pending_gpu_num,"
          "idle_gpu_num,gpu_utilization")


def _write_vc(path: Path, days: int, capacity: int, seed: int) -> None:
    """A per-minute series with a purely daily rhythm (so the seasonal-day baseline is exact)."""
    rng = np.random.default_rng(seed)
    daily_run = rng.integers(0, capacity + 1, 144)  # one level per 10 minutes of the day
    daily_pend = rng.integers(0, 5, 144) * (rng.random(144) < 0.3)
    start = datetime(2020, 5, 1, tzinfo=UTC)
    lines = [HEADER]
    for minute in range(days * 1440):
        b = (minute // 10) % 144
        run, pend = int(daily_run[b]), int(daily_pend[b])
        ts = (start + timedelta(minutes=minute)).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"{ts},1,1,0,{capacity},{run},{pend},{capacity - run},{run / capacity:.3f}")
    with gzip.open(path, "wt") as fh:
        fh.write("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("helios")
    _write_vc(folder / "vcAAA_cluster_sequence.csv.gz", 9, 32, 1)
    _write_vc(folder / "vcBBB_cluster_sequence.csv.gz", 9, 16, 2)
    (folder / "Earth_gpu_number.csv").write_text("date,vcAAA,vcBBB\n2020-05-01,32,16\n")
    return folder


def test_smape_counts_a_correct_empty_forecast_as_zero() -> None:
    assert smape(np.array([0.0, 10.0, 0.0]), np.array([0.0, 10.0, 5.0])).tolist() == [0.0, 0.0, 200.0]


@pytest.fixture(scope="module")
def result(trace_dir: Path) -> dict[str, Any]:
    return run_forecast_bench(trace_dir, train_days=7)


def test_bench_scores_model_and_baselines_per_target_and_horizon(result: dict[str, Any]) -> None:
    assert result["series"] == ["vcAAA", "vcBBB"] and result["skipped_files"] == ["Earth_gpu_number.csv"]
    for method in (result["model"], *(result["baselines"][b] for b in ("last", "seasonal_day", "seasonal_week"))):
        for metric in ("smape", "mae"):
            for target in ("running_gpu_num", "pending_gpu_num"):
                assert set(method[metric][target]) == {"10m", "1h", "3h"}
    # the series repeat every day: yesterday's value is exact, and so is last week's
    assert result["baselines"]["seasonal_day"]["mae"]["running_gpu_num"]["1h"] == 0.0
    assert result["baselines"]["seasonal_week"]["smape"]["pending_gpu_num"]["3h"] == 0.0
    assert result["baselines"]["last"]["mae"]["running_gpu_num"]["1h"] > 0
    assert set(result["goal"]["by"]) == {"running_gpu_num.1h", "running_gpu_num.3h", "pending_gpu_num.1h",
                                         "pending_gpu_num.3h"}


def test_bench_adds_pinball_and_coverage_at_1h_to_24h_beside_the_baselines(result: dict[str, Any]) -> None:
    """Issue 21: quantile scores under the same model/baselines keys; the point scores stay."""
    horizons = {"1h", "3h", "6h", "24h"}
    for target in ("running_gpu_num", "pending_gpu_num"):
        assert set(result["model"]["pinball"][target]) == horizons
        assert set(result["model"]["coverage80"][target]) == horizons
        assert all(0.0 <= c <= 1.0 for c in result["model"]["coverage80"][target].values())
        for name in ("last", "seasonal_day", "seasonal_week"):
            assert set(result["baselines"][name]["pinball"][target]) == horizons
    # a purely daily series: yesterday's value never misses, and its empirical daily change is 0
    assert result["baselines"]["seasonal_day"]["pinball"]["running_gpu_num"]["6h"] == 0.0
    assert result["baselines"]["last"]["pinball"]["running_gpu_num"]["6h"] > 0
    goal = result["quantile_goal"]["by"]["running_gpu_num.6h"]
    assert goal["best_baseline"] == "seasonal_day" and goal["needs"] == 0.15
    assert "smape" in result["model"] and "10m" in result["model"]["smape"]["running_gpu_num"]
    # the model's own baseline alone, and its weight of persistence, for what the trees add over it
    prior = result["model_prior"]
    assert set(prior["pinball"]["pending_gpu_num"]) == horizons
    assert all(0.9 <= w <= 1.0 for per_h in prior["persistence_weight"].values() for w in per_h.values())


def test_bench_forecast_cli_prints_json(trace_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["forecast", "--data", str(trace_dir), "--train-days", "7", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "1h" in result["model"]["smape"]["running_gpu_num"]


def test_bench_forecast_refuses_a_folder_without_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    assert bench_main(["forecast", "--data", str(tmp_path)]) == 1
    assert "no CSV with columns" in capsys.readouterr().err
