"""`sentinel forecast` against small real stores: table, JSON, PNG, risk with evidence, and the demo's store."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sentinel.capacity.bins import ALL, LoadBin
from sentinel.capacity.bins_store import record_load_bins
from sentinel.cli.demo import DemoOptions, run_demo
from sentinel.cli.main import main
from sentinel.events import Finding, FindingClass, GpuReading, GpuState, Recommendation, Severity, TelemetrySample
from sentinel.store.engine import make_engine, upgrade
from sentinel.store.repository import Repository

START = 1_767_225_600.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four days of bins with a daily rhythm, four 8-GPU nodes (one with a lost GPU), one risky node."""
    path = tmp_path_factory.mktemp("fc") / "s.db"
    repo = Repository(make_engine(f"sqlite:///{path}"))
    upgrade(repo.engine)
    n = 4 * 144
    t = np.arange(n)
    run = np.round(16 + 10 * np.sin(2 * np.pi * t / 144))
    record_load_bins(repo.engine, [LoadBin(START + 600.0 * i, ALL, float(run[i]), float(i % 3), i % 2, 32.0, 0.8,
                                           "squeue") for i in range(n)])
    now = START + 600.0 * n
    repo.record_samples([
        TelemetrySample(node=f"node-{i}", ts=now, seq=1, gpus=[
            GpuReading(index=g, state=GpuState.LOST if (i, g) == (3, 0) else GpuState.OK) for g in range(8)])
        for i in range(4)])
    repo.add_finding(Finding(id="thermal:node-1:1", node="node-1", ts=now - 300, observed_ts=now - 300,
                             kind=FindingClass.GPU_THERMAL, rule="thermal-trend", severity=Severity.CRITICAL,
                             recommendation=Recommendation.CHECKPOINT_DRAIN, confidence=0.7,
                             summary="GPU 2 at 96 C and rising", gpu_index=2, evidence={"temp_c": 96.0}), None)
    repo.add_finding(Finding(id="xid13:node-2:1", node="node-2", ts=now - 200, observed_ts=now - 200,
                             kind=FindingClass.GPU_XID, rule="xid-catalog", severity=Severity.INFO,
                             recommendation=Recommendation.NONE, confidence=1.0, summary="Xid 13 (application)"),
                     None)
    return path


def test_json_has_every_bin_with_intervals_and_the_risk_of_the_hot_node(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["forecast", "--db", str(store), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["partition"] == ALL and report["method"] == "gradient_boosting"
    assert set(report["forecast"]) == {"running_gpus", "pending_gpus", "submissions"}
    points = report["forecast"]["running_gpus"]
    assert len(points) == 18 and all(p["lo"] <= p["point"] <= p["hi"] for p in points)
    risk = report["risk"]
    assert risk["healthy_gpus"] == 31 and risk["healthy_nodes"] == 4  # node-3 has one GPU lost
    assert risk["expected_nodes_lost"] == pytest.approx(0.7) and risk["expected_gpus_lost"] == pytest.approx(5.6)
    top = risk["top_nodes"]
    assert [t["node"] for t in top] == ["node-1"]  # the Xid 13 recommends nothing: no risk
    assert top[0]["rule"] == "thermal-trend" and top[0]["evidence"] == {"temp_c": 96.0}
    assert report["outlook"][0]["available_gpus"] == pytest.approx(31 - 5.6)


def test_table_shows_intervals_charts_and_nodes_at_risk(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["forecast", "--db", str(store), "--horizon", "24h"]) == 0
    text = capsys.readouterr().out
    assert "RUNNING GPUs" in text and "+24h00m" in text and "+1h00m" in text and "+0h10m" not in text  # hourly
    assert "running GPUs  (* history, o forecast" in text
    assert "node-1" in text and "GPU 2 at 96 C and rising" in text


def test_plot_writes_a_png(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "fc.png"
    assert main(["forecast", "--db", str(store), "--plot", str(target)]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot written to {target}" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [(["--partition", "nope"], "no load bins for it"),
                                               (["--horizon", "2d"], "between 10m and 24h"),
                                               (["--partition", "a;rm"], "not a valid partition name")])
def test_bad_options_fail_with_a_clear_error(store: Path, args: list[str], message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["forecast", "--db", str(store), *args]) == 1
    assert message in capsys.readouterr().err


def test_right_after_the_demo_the_forecast_has_a_history_and_nodes_at_risk(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "demo.db"
    report = run_demo(DemoOptions(nodes=9, duration_s=1800.0, db_path=str(db), load_history_days=4))
    assert report.summary["load_bins"]["history"] > 500 and report.summary["load_bins"]["live"] >= 2
    assert main(["forecast", "--db", str(db), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "gradient_boosting" and len(out["forecast"]["running_gpus"]) == 18
    top = out["risk"]["top_nodes"]  # the demo's faulty nodes, with the finding behind each
    assert top and all(t["rule"] and t["summary"] and t["state"] in ("in service", "drained") for t in top)
    states = [t["state"] for t in top]
    assert states == sorted(states, key=lambda state: state != "in service")  # nodes still in service first


def test_a_demo_store_without_history_falls_back_to_the_last_value(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "demo.db"
    run_demo(DemoOptions(nodes=9, duration_s=1800.0, db_path=str(db), load_history_days=0))
    assert main(["forecast", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "method last_value" in text and "too short to train" in text


def _copy(src: Path, dst: Path) -> Path:
    """A consistent copy of a SQLite store in WAL mode (the main file alone may lack recent writes)."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    return dst


def test_the_second_call_uses_the_stored_model_until_six_newer_bins_arrive(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _copy(store, tmp_path / "copy.db")
    engine = make_engine(f"sqlite:///{db}")
    with engine.begin() as conn:  # start cold whatever earlier tests stored
        conn.exec_driver_sql("DELETE FROM forecast_models")

    def call(*extra: str) -> dict[str, Any]:
        assert main(["forecast", "--db", str(db), "-o", "json", *extra]) == 0
        return dict(json.loads(capsys.readouterr().out))

    cold, still_cold = call(), call()  # a plain forecast writes nothing, not even the model it fitted
    assert cold["model"]["source"] == still_cold["model"]["source"] == "fitted"
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM forecast_models").scalar() == 0
        assert conn.exec_driver_sql("SELECT count(*) FROM forecasts").scalar() == 0
    saved, warm = call("--save"), call()
    assert saved["model"]["source"] == "fitted" and warm["model"]["source"] == "stored"
    assert warm["forecast"] == cold["forecast"]
    assert call("--refit")["model"]["source"] == "fitted"
    assert call("--horizon", "24h")["model"]["source"] == "fitted"  # the stored model lacks the 24 h horizons
    last = 4 * 144 - 1
    record_load_bins(engine, [LoadBin(START + 600.0 * (last + i), ALL, 20.0, 1.0, 0, 32.0, 0.8, "squeue")
                              for i in range(1, 6)])
    assert call()["model"]["source"] == "stored"  # five newer bins: still fresh
    record_load_bins(engine, [LoadBin(START + 600.0 * (last + 6), ALL, 20.0, 1.0, 0, 32.0, 0.8, "squeue")])
    assert call()["model"]["source"] == "fitted"


def test_a_warm_forecast_imports_no_scikit_learn(store: Path, tmp_path: Path) -> None:
    """The stored model is evaluated with numpy: the command's start does not pay for scikit-learn or scipy."""
    db = _copy(store, tmp_path / "copy.db")
    assert main(["forecast", "--db", str(db), "-o", "json", "--save"]) == 0  # stores a model if none was
    script = ("import sys\nfrom sentinel.cli.main import main\n"
              f"assert main(['forecast', '--db', {str(db)!r}, '-o', 'json']) == 0\n"
              "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy', 'matplotlib'))\n"
              "print('HEAVY', heavy)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert '"source": "stored"' in done.stdout
    assert '"quantiles_from": "quantile models of the aggregate load bins"' in done.stdout  # numpy only as well
    assert "HEAVY []" in done.stdout


def test_the_parser_repeats_the_server_bench_intervals() -> None:
    from sentinel_bench import server_verbs
    from sentinel_bench.server import DEFAULT_INTERVAL_S

    assert server_verbs.DEFAULT_INTERVAL_S == DEFAULT_INTERVAL_S


def test_new_load_bins_publish_the_capacity_outlook_gauges_the_alerts_read(store: Path) -> None:
    """Issue 17: the forecast gauges had no caller, so SentinelForecastStale fired for ever and the capacity alert
    could never fire. The load service's after-bins hook (as the controller and `sentinel run` wire it) now
    publishes them: demand per horizon with its interval, expected losses, healthy GPUs, margin, timestamp."""
    from sentinel.clock import ManualClock
    from sentinel.config import from_mapping
    from sentinel.daemon import after_bins
    from sentinel.obs.metrics import Metrics

    metrics = Metrics()
    clock = ManualClock(START + 600.0 * 4 * 144 + 30)
    hook = after_bins(from_mapping({"load": {"refit": False}}), metrics, clock)
    hook(make_engine(f"sqlite:///{store}"), [ALL])
    get = metrics.registry.get_sample_value
    assert get("sentinel_forecast_generated_timestamp_seconds") == clock.now()
    for horizon in ("1h", "3h"):
        lower, mean, upper = (get("sentinel_forecast_demand_gpus", {"horizon": horizon, "bound": b})
                              for b in ("lower", "mean", "upper"))
        assert lower is not None and mean is not None and upper is not None and 0 <= lower <= mean <= upper
        margin = get("sentinel_forecast_capacity_margin_gpus", {"horizon": horizon})
        assert margin == pytest.approx(get("sentinel_forecast_healthy_gpus")
                                       - get("sentinel_forecast_expected_lost_gpus", {"horizon": horizon}) - upper)
    assert get("sentinel_forecast_healthy_gpus") == 31  # four 8-GPU nodes, one GPU lost


def test_without_load_bins_nothing_is_published_and_the_stale_alert_stays_quiet(repo: Repository) -> None:
    from sentinel.capacity.forecast.gauges import publish_outlook
    from sentinel.clock import ManualClock
    from sentinel.obs.metrics import Metrics

    metrics = Metrics()
    assert publish_outlook(repo.engine, metrics, ManualClock()) == {}
    assert metrics.registry.get_sample_value("sentinel_forecast_generated_timestamp_seconds") == 0


def test_the_plot_marks_now_says_utc_and_draws_capacity_as_it_was(store: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 17: the plot drew today's capacity across all history, had no 'now' and no time zone."""
    import matplotlib.pyplot as plt

    from sentinel.capacity.forecast.outlook import build_report
    from sentinel.capacity.forecast.plot import plot_report

    figures: list[Any] = []
    monkeypatch.setattr(plt, "close", figures.append)
    report = build_report(make_engine(f"sqlite:///{store}"), None, 3 * 3600.0, save_model=False)
    plot_report(report, str(tmp_path / "f.png"))
    [fig] = figures
    running = fig.axes[0]
    labels = [line.get_label() for line in running.get_lines()]
    assert "now" in labels and "capacity" in labels
    assert fig.axes[-1].get_xlabel() == "time (UTC)"
    [capacity] = [line for line in running.get_lines() if line.get_label() == "capacity"]
    assert len(capacity.get_xdata()) == len(report["history"]["ts"])  # one value per bin, not one line


def test_json_and_table_show_p10_p50_p90_per_horizon_and_the_inputs_used(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 21: the quantiles at 1 h, 3 h, 6 h and 24 h, and which inputs the forecast read."""
    assert main(["forecast", "--db", str(store), "-o", "json", "--horizon", "24h"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"].startswith("aggregate load bins (")
    q = report["quantiles"]["running_gpus"]
    assert list(q) == ["1h", "3h", "6h", "24h"] and list(report["quantiles"]["pending_gpus"]) == list(q)
    assert all(v["p10"] <= v["p50"] <= v["p90"] <= 32 for v in q.values())  # never above the capacity
    assert report["quantiles_from"] == "quantile models of the aggregate load bins"
    assert main(["forecast", "--db", str(store), "--horizon", "3h"]) == 0
    text = capsys.readouterr().out
    assert "inputs: aggregate load bins" in text and "p10 / p50 / p90" in text
    assert "+3h" in text and "+6h" not in text  # only the horizons asked for


def test_a_warm_forecast_takes_its_quantiles_from_the_quantile_models_stored_with_the_forecaster(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 21: without a job table the quantiles came from the point model's interval; the quantile models are
    now fitted with the forecaster, stored in its blob and evaluated with numpy on a warm call."""
    db = _copy(store, tmp_path / "copy.db")
    with make_engine(f"sqlite:///{db}").begin() as conn:
        conn.exec_driver_sql("DELETE FROM forecast_models")
    assert main(["forecast", "--db", str(db), "-o", "json", "--horizon", "24h", "--save"]) == 0
    saved = json.loads(capsys.readouterr().out)
    assert main(["forecast", "--db", str(db), "-o", "json", "--horizon", "24h"]) == 0
    warm = json.loads(capsys.readouterr().out)
    assert warm["model"]["source"] == "stored" and warm["model"]["quantile_models"] is True
    assert warm["quantiles_from"] == "quantile models of the aggregate load bins"
    assert warm["quantiles"] == saved["quantiles"]  # the stored models are the fitted ones
    bounds = [(round(p["lo"], 2), round(p["point"], 2), round(p["hi"], 2))
              for p in (warm["forecast"]["running_gpus"][b - 1] for b in (6, 18, 36, 144))]
    ours = [(v["p10"], v["p50"], v["p90"]) for v in warm["quantiles"]["running_gpus"].values()]
    assert ours != bounds  # not the point model's interval
    assert main(["forecast", "--db", str(db), "--horizon", "24h"]) == 0
    assert "p10 / p50 / p90, from the quantile models of the aggregate load bins" in capsys.readouterr().out


def test_a_forecaster_stored_before_the_quantile_models_falls_back_to_its_interval(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A blob from before the quantile models (the forecaster alone) is still used: the quantiles are then the
    point forecast and its interval bounds, as before."""
    from sentinel.capacity.bins_store import save_forecaster
    from sentinel.capacity.forecast.resident import history
    from sentinel_models.forecast import ANCHORS, COARSE, DemandForecaster

    db = _copy(store, tmp_path / "copy.db")
    engine = make_engine(f"sqlite:///{db}")
    s = history(engine, ALL)
    old = DemandForecaster(anchors=ANCHORS + COARSE).fit([s])
    save_forecaster(engine, ALL, float(s.ts[-1]), len(s), START, old.anchors, old.to_bytes())
    assert main(["forecast", "--db", str(db), "-o", "json", "--horizon", "24h"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"]["source"] == "stored" and report["model"]["quantile_models"] is False
    assert report["quantiles_from"] == "aggregate load bins"
    q = report["quantiles"]["running_gpus"]
    at_6h = report["forecast"]["running_gpus"][35]
    assert q["6h"] == {"p10": round(at_6h["lo"], 2), "p50": round(at_6h["point"], 2), "p90": round(at_6h["hi"], 2)}
