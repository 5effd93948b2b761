"""How ``sentinel demo`` shows its run: a readable timeline, a summary table, and the pass/fail check."""

from __future__ import annotations

from typing import Any

from sentinel.cli.demo import DemoReport
from sentinel.tables import render

STAGE_MARK = {
    "fault": "!! fault",
    "job": "xx job",
    "finding": "-> finding",
    "decision": "=> decision",
    "action": "   action",
}


def render_demo(report: DemoReport, limit: int = 200, program: str = "sentinel") -> str:
    """The demo's story as text; ``program`` is how the suggested commands are spelled (as the user ran it)."""
    s = report.summary
    lines = [
        f"Simulated {s['nodes']} nodes x {s['gpus'] // s['nodes']} GPUs for {s['simulated_s'] / 60:.0f} min "
        f"in {s['wall_s']} s. Timeline (T+ simulated time):",
        "",
    ]
    for entry in report.timeline[:limit]:
        offset = int(entry.ts - report.start_ts)
        lines.append(
            f"T+{offset // 60:02d}:{offset % 60:02d}  {entry.node:<14} {STAGE_MARK[entry.stage]:<11} {entry.text[:110]}"
        )
    if len(report.timeline) > limit:
        lines.append(f"... {len(report.timeline) - limit} more events in the store")
    rows = [
        {"what": "fatal faults injected", "value": s["faults_injected"]},
        {"what": "fatal faults detected", "value": s["fatal_faults_detected"]},
        {
            "what": "nodes drained (all with a fatal fault)",
            "value": f"{s['nodes_drained']} ({s['fatal_nodes_drained']})",
        },
        {"what": "benign events (application Xids) / actions on them",
         "value": f"{s['benign_events']} / {s['benign_actions']}"},
        {"what": "actions on healthy nodes", "value": s["false_actions"]},
        {"what": "mean detection delay (s)", "value": s["mean_detection_delay_s"]},
        {"what": "  by fault kind (s)", "value": _kv(s["detection_delay_s_by_kind"])},
        {
            "what": "faults with a precursor drained before they failed",
            "value": f"{s['warned_drained_before_failure']}/"
            f"{s['warned_faults']}, by " + ", ".join(f"{x:.0f} s" for x in s["lead_time_s"]),
        },
        {"what": "jobs checkpointed before drain", "value": s["jobs_checkpointed_before_drain"]},
        {"what": "jobs crashed by faults with no warning", "value": s["jobs_crashed_by_faults"]},
    ]
    lines += [
        "",
        render(rows, [("what", "summary"), ("value", "")]),
        "",
        f"Everything above is in the store ({s['store']}). Try:",
        f"  {program} incidents --db {s['store'].removeprefix('sqlite:///')}",
        f"  {program} nodes --db {s['store'].removeprefix('sqlite:///')}",
    ]
    return "\n".join(lines)


def _kv(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items())


def expectations_met(summary: dict[str, Any]) -> list[str]:
    """What the demo promises: every fatal fault detected and its node drained, no action on benign events."""
    problems = []
    if summary["fatal_faults_detected"] != summary["faults_injected"]:
        problems.append(f"{summary['fatal_faults_detected']}/{summary['faults_injected']} fatal faults detected")
    if summary["fatal_nodes_drained"] != summary["faults_injected"]:
        problems.append(f"{summary['fatal_nodes_drained']}/{summary['faults_injected']} faulty nodes drained")
    if summary["benign_actions"] or summary["false_actions"]:
        problems.append(f"{summary['benign_actions']} benign / {summary['false_actions']} false actions")
    return problems
