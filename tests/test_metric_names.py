"""The Grafana dashboard and the Prometheus rules only use metric names Sentinel exports (or that the rules
record, or Prometheus itself makes), so renaming a metric without updating them fails here."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from sentinel.obs.metrics import Metrics
from tests.prom import tool

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "sentinel-rules.yml"
DASHBOARDS = sorted((ROOT / "deploy" / "grafana").glob("*.json"))
PROMETHEUS_OWN = {"up", "ALERTS", "ALERTS_FOR_STATE"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
            "group_right", "inf", "nan"}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",), "info": ("_info",)}


def exported() -> set[str]:
    names = set()
    for family in Metrics().registry.collect():
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


def metric_names(expr: str) -> set[str]:
    """Identifiers in a PromQL expression that name series (not functions, keywords, labels or durations)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\$\{?\w+\}?", "", expr)  # Grafana variables
    found = re.findall(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?", expr)
    return {name for name, call in found if not call and name not in KEYWORDS}


def _exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from _exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _exprs(item)


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_the_tokenizer_finds_series_and_skips_functions_labels_and_durations() -> None:
    expr = ('histogram_quantile(0.99, sum by (le) (rate(x_bucket{job="a b"}[5m]))) / on (topic) '
            'clamp_min(y_total offset 5m, 1e-6) > bool ${var} and z:rec:rate5m')
    assert metric_names(expr) == {"x_bucket", "y_total", "z:rec:rate5m"}


def test_rules_and_dashboards_use_only_names_that_exist() -> None:
    known = exported() | PROMETHEUS_OWN | {rule["record"] for rule in _rules() if "record" in rule}
    sources: dict[str, list[str]] = {"rules": [rule["expr"] for rule in _rules()]}
    for path in DASHBOARDS:
        sources[path.name] = list(_exprs(json.loads(path.read_text())))
    assert len(sources) >= 2 and all(sources.values())
    unknown = {name: sorted(metric_names(e) - known) for name, exprs in sources.items() for e in exprs
               if metric_names(e) - known}
    assert unknown == {}


def test_the_dashboard_covers_fleet_health_risk_actions_and_forecast() -> None:
    (path,) = [p for p in DASHBOARDS if p.name == "sentinel-fleet.json"]
    dash = json.loads(path.read_text())
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert {"Fleet health", "Risk", "Actions", "Forecast"} <= set(rows)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    used = {name for e in _exprs(dash) for name in metric_names(e)}
    assert {"sentinel_node_risk", "sentinel_nodes", "sentinel_decisions_total", "sentinel_commands_total",
            "sentinel_forecast_demand_gpus", "sentinel_breaker_open"} <= used


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule (Grafana's $__rate_interval stands in as 5m)."""
    exprs = [e.replace("$__rate_interval", "5m") for path in DASHBOARDS for e in _exprs(json.loads(path.read_text()))]
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:q{i}", "expr": e}
                                                        for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(json.dumps(rules))
    result = subprocess.run([tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
