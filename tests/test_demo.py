"""`sentinel demo` keeps its promises: every fatal fault detected and drained, nothing done on benign events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel.cli.demo import DemoOptions, run_demo
from sentinel.cli.demo_view import expectations_met, render_demo

REQUIRED_KEYS = {"faults_injected", "fatal_faults_detected", "nodes_drained", "benign_events", "benign_actions",
                 "false_actions", "mean_detection_delay_s"}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_fatal_fault_is_detected_and_drained_and_benign_events_are_left_alone(tmp_path: Path,
                                                                                     seed: int) -> None:
    report = run_demo(DemoOptions(seed=seed, db_path=str(tmp_path / "d.db")))
    s = report.summary
    assert s["faults_injected"] == 6 and s["benign_events"] == 3
    assert s["fatal_faults_detected"] == 6 and s["fatal_nodes_drained"] == 6 and s["nodes_drained"] == 6
    assert s["benign_actions"] == 0 and s["false_actions"] == 0
    assert expectations_met(s) == []
    assert s["thermal_drained_before_shutdown"] == s["thermal_shutdowns"]  # predicted, not just detected
    assert all(lead > 0 for lead in s["thermal_lead_time_s"])


def test_the_timeline_reads_fault_then_finding_then_decision_then_action(tmp_path: Path) -> None:
    report = run_demo(DemoOptions(db_path=str(tmp_path / "d.db")))
    node = next(e.node for e in report.timeline if e.stage == "fault" and "xid79" in e.text)
    stages = [e.stage for e in report.timeline if e.node == node and e.stage != "job"]
    assert stages[:3] == ["fault", "finding", "finding"] and stages[3] == "decision" and "action" in stages[4:]
    text = render_demo(report)
    assert "fatal faults detected" in text and "sentinel incidents --db" in text


def test_demo_json_prints_one_object_with_the_promised_keys(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "sentinel.cli", "demo", "--json", "--db-path",
                             str(tmp_path / "d.db")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary.keys() >= REQUIRED_KEYS
    assert summary["fatal_faults_detected"] == summary["faults_injected"] > 0


def test_a_cluster_too_small_for_the_fault_plan_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs 9 nodes"):
        run_demo(DemoOptions(nodes=4, db_path=str(tmp_path / "d.db")))
