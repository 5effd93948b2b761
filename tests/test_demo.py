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
    assert s["faults_by_kind"] == {"thermal": 2, "hbm": 2, "silent": 2}  # the fleet simulator's vocabulary
    # a fault with a precursor is predicted, not just detected: its node is drained before it fails
    assert s["warned_faults"] == s["warned_drained_before_failure"] == 4
    assert all(lead > 0 for lead in s["lead_time_s"])
    assert s["jobs_crashed_by_faults"] <= 2  # only the faults without a warning may crash their job


def test_the_timeline_reads_fault_then_finding_then_decision_then_action(tmp_path: Path) -> None:
    report = run_demo(DemoOptions(db_path=str(tmp_path / "d.db")))
    node = next(e.node for e in report.timeline if e.stage == "fault" and "silent failure" in e.text)
    stages = [e.stage for e in report.timeline if e.node == node and e.stage != "job"]
    assert stages[0] == "fault" and stages[1] == "finding"
    assert stages.index("decision") < stages.index("action")
    warned = next(e.node for e in report.timeline if e.stage == "fault" and "precursor starts" in e.text)
    mine = [e for e in report.timeline if e.node == warned]
    drained = next(e.ts for e in mine if e.stage == "action" and e.text.startswith("drain: ok"))
    failed = next(e.ts for e in mine if e.stage == "fault" and "failure" in e.text)
    assert mine[0].stage == "fault" and drained < failed  # precursor, findings, drain, and only then the failure
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
