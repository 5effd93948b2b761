"""`sentinel-bench detect` scores drains against ground truth the way its docstring says."""

from __future__ import annotations

import json
import subprocess
import sys

from sentinel.events import TelemetrySample
from sentinel.sim.groundtruth import TruthEvent
from sentinel_bench.baselines import Signal
from sentinel_bench.detect import GRACE_S, episodes, score, score_baseline


def _fault(node: str, start: float, failure: float, cls: str = "hbm") -> TruthEvent:
    return TruthEvent(f"f-{node}-{failure}", "fault", cls, node, 0, start, failure, start < failure, True)


def test_a_drain_inside_the_window_is_caught_with_its_lead_time() -> None:
    truth = [_fault("n1", 100.0, 1000.0), _fault("n2", 500.0, 500.0, "silent")]
    result = score([Signal("n1", 400.0, False), Signal("n1", 600.0, True), Signal("n2", 510.0, True)], truth, 10.0)
    assert result["caught"] == 2 and result["recall"] == 1 and result["precision"] == 1
    assert result["by_class"]["hbm"]["lead_time_median_s"] == 600.0  # from the first alert at 400 s
    assert result["detection_delay_median_s"] == 10.0


def test_late_drains_miss_and_stray_drains_are_false() -> None:
    truth = [_fault("n1", 100.0, 1000.0)]
    result = score([Signal("n1", 1000.0 + GRACE_S + 1, True), Signal("n9", 50.0, True)], truth, 4.0)
    assert result["caught"] == 0 and result["false_drains"] == 2 and result["precision"] == 0
    assert result["false_drains_per_1000_node_days"] == 500.0


def test_a_node_already_drained_before_a_fault_began_counts_as_caught() -> None:
    truth = [_fault("n1", 100.0, 200.0), _fault("n1", 5000.0, 6000.0)]
    result = score([Signal("n1", 150.0, True)], truth, 1.0)
    assert result["caught"] == 2 and result["false_drains"] == 0


def test_alerts_on_a_healthy_node_are_false_and_findings_on_a_failed_node_are_counted_apart() -> None:
    truth = [_fault("n1", 100.0, 1000.0)]
    signals = [Signal("n1", 50.0, False, "hazard-model"), Signal("n1", 1000.0 + GRACE_S + 60, False, "hazard-model"),
               Signal("n2", 70.0, False, "straggler-clock")]
    result = score(signals, truth, 2.0)
    assert result["false_alerts_by_rule"] == {"hazard-model": 1, "straggler-clock": 1}  # n1 before its fault began
    assert result["findings_after_failure"] == 1 and result["false_alerts_per_1000_node_days"] == 1000.0
    assert [a["node"] for a in result["false_alert_list"]] == ["n1", "n2"]


def test_the_operator_alerts_and_the_raw_findings_behind_them_are_counted_apart() -> None:
    truth = [_fault("n1", 1000.0, 4000.0)]
    alerts = [Signal("n1", 2500.0, False, "repeats: pcie-replay-rate"), Signal("n3", 90.0, False, "critical")]
    raw = [Signal("n2", t, False, "pcie-replay-rate") for t in (10.0, 20.0, 30.0)] + [Signal("n3", 90.0, False)]
    result = score(alerts + [Signal("n1", 3000.0, True)], truth, 100.0, findings=raw)
    assert result["false_alerts_per_1000_node_days"] == 10.0 and result["false_findings_per_1000_node_days"] == 40.0
    assert result["alerts_per_1000_node_days"] == 20.0
    assert result["alert_lead_precursor_median_s"] == 1500.0  # the first operator alert, not the drain


def test_an_alert_on_a_slow_gpus_node_after_its_onset_is_a_true_one() -> None:
    slow = TruthEvent("s1", "fault", "fail_slow", "n1", 2, 100.0, 100.0, False, False)
    result = score([Signal("n1", 5000.0, False, "persists: straggler-clock"), Signal("n1", 50.0, False)],
                   [slow], 1.0)
    assert result["false_alerts_by_rule"] == {"": 1}  # only the one before the GPU slowed


def test_the_static_baseline_pages_once_per_node_episode() -> None:
    crossings = [Signal("n2", t, False, "pcie-replay>8/min") for t in (0.0, 600.0, 1200.0)]
    crossings += [Signal("n2", 1200.0 + 3600 + 3600 + 1, False, "pcie-replay>8/min"), Signal("n3", 5.0, True, "x")]
    assert [(s.node, s.ts_s) for s in episodes(crossings)] == [("n2", 0.0), ("n3", 5.0), ("n2", 8401.0)]
    result = score_baseline(crossings, [], 1.0)
    assert result["false_alerts_per_1000_node_days"] == 3000.0 and result["false_drains"] == 1
    assert result["false_findings_per_1000_node_days"] == 4000.0


def test_bench_detect_runs_a_shipped_scenario_with_both_baselines() -> None:
    result = subprocess.run([sys.executable, "-m", "sentinel_bench.cli", "detect", "--scenario", "smoke",
                             "--max-fraction", "1", "--model", "none", "--json"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    for key in ("precision", "recall", "f1", "lead_time_median_s", "lead_time_precursor_median_s",
                "false_drains_per_1000_node_days", "benign_actions", "by_class", "with_precursor",
                "drained_before_failure", "false_alerts_per_1000_node_days", "false_findings_per_1000_node_days",
                "alerts_per_1000_node_days", "alert_lead_precursor_median_s"):
        assert key in data and key in data["baselines"]["threshold"] and key in data["baselines"]["reactive"]
    assert "recall" in data["with_precursor"] and data["background"] is True
    assert data["faults"] > 0 and data["recall"] is not None and data["benign_actions"] == 0
    for key in ("share_within_2_steps", "false_findings", "false_alerts"):
        assert key in data["stragglers"]


def test_the_lead_time_of_precursor_faults_is_reported_apart() -> None:
    truth = [_fault("n1", 100.0, 1000.0), _fault("n2", 500.0, 500.0, "silent")]
    result = score([Signal("n1", 400.0, False), Signal("n1", 900.0, True), Signal("n2", 510.0, True)], truth, 10.0)
    assert result["lead_time_precursor_median_s"] == 600.0  # n2 had no precursor: not in this median
    assert result["drained_before_failure"] == 1 and result["with_precursor"]["recall"] == 1.0


def test_static_thresholds_act_on_background_counters_as_the_tools_they_copy() -> None:
    from sentinel.events import GpuReading, NicReading
    from sentinel_bench.baselines import ThresholdBaseline

    def sample(t: float, replays: int, symbols: int) -> TelemetrySample:
        nic = NicReading(name="mlx5_0/1", link_layer="infiniband", counters={"symbol_error": symbols})
        return TelemetrySample(node="n1", ts=t, gpus=[GpuReading(index=0, temp_c=60.0, pcie_replay=replays)],
                               nics=[nic])

    baseline = ThresholdBaseline()
    signals = []
    for k in range(12):  # 3 replays and 20 symbol errors every 10 s: 18/min and 7,200/h
        signals += baseline.sample(sample(10.0 * k, 3 * k, 20 * k), 10.0 * k)
    assert [(s.why, s.drain) for s in signals] == [("pcie-replay>8/min", False), ("symbol_error>120/h", True)]
