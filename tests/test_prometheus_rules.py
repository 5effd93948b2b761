"""deploy/prometheus: the rules pass `promtool check rules`, their unit tests pass `promtool test rules`, every
alert is exercised by a test, and every alert links a runbook section that exists in docs/operations.md."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prom import tool

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "sentinel-rules.yml"
RULE_TESTS = sorted((ROOT / "deploy" / "prometheus" / "tests").glob("*.yml"))
OPERATIONS = ROOT / "docs" / "operations.md"


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, timeout=120)


def test_rules_pass_promtool_check() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_rule_unit_tests_pass(path: Path) -> None:
    result = _promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_exercised_by_a_rule_test() -> None:
    tested = set()
    for path in RULE_TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            tested |= {case["alertname"] for case in group.get("alert_rule_test", []) if case.get("exp_alerts")}
    assert {a["alert"] for a in alerts()} - tested == set()


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}


def test_every_alert_has_a_severity_and_a_runbook_section_that_exists() -> None:
    anchors = _anchors(OPERATIONS.read_text())
    for alert in alerts():
        assert alert["labels"]["severity"] in ("critical", "warning", "info"), alert["alert"]
        url = alert["annotations"]["runbook_url"]
        anchor = url.rsplit("#", 1)[1]
        assert anchor == alert["alert"].lower(), f"{alert['alert']}: runbook anchor {anchor}"
        assert anchor in anchors, f"{alert['alert']}: no heading for #{anchor} in docs/operations.md"


def test_the_alerts_the_operations_issue_asks_for_exist() -> None:
    names = {a["alert"] for a in alerts()}
    assert {"SentinelNodeAlert", "SentinelFatalGpuFault", "SentinelBreakerOpen", "SentinelPipelineLag",
            "SentinelDeadLetters", "SentinelAgentAbsent", "SentinelActuatorFailures",
            "SentinelForecastCapacityShortfall"} <= names
