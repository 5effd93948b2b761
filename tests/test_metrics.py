"""The metrics module: setters validate model output, risk series expire, and the registry of a pipeline that
handled real traffic (a fatal fault, a bad message, a dry-run command) passes `promtool check metrics` and
counts what happened."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from sentinel import codec
from sentinel.actuator.steps import DryRunActuator
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.daemon import build_pipeline
from sentinel.errors import ValidationError
from sentinel.events import GpuReading, GpuState, TelemetrySample
from sentinel.obs.metrics import Metrics
from sentinel.store.repository import Repository
from sentinel.transport import TELEMETRY
from tests.prom import check_metrics

START = 1_800_000_000.0


def test_node_risk_outside_zero_to_one_is_refused() -> None:
    metrics = Metrics()
    with pytest.raises(ValidationError, match="node risk must be in"):
        metrics.set_node_risk("n1", 1.5, START)
    with pytest.raises(ValidationError):
        metrics.set_node_risk("n1", float("nan"), START)


def test_node_risk_series_expire_when_not_renewed() -> None:
    metrics = Metrics()
    metrics.set_node_risk("n1", 0.9, START)
    metrics.set_node_risk("n2", 0.4, START + 500)
    assert metrics.expire_node_risk(START + 901, ttl_s=900) == ["n1"]
    assert metrics.registry.get_sample_value("sentinel_node_risk", {"node": "n1"}) is None
    assert metrics.registry.get_sample_value("sentinel_node_risk", {"node": "n2"}) == 0.4


def test_a_new_model_version_replaces_the_old_info_series() -> None:
    metrics = Metrics()
    metrics.set_model("hazard", "2026-01-01-abc", 1_767_225_600.0)
    metrics.set_model("hazard", "2026-02-01-def", 1_769_904_000.0)
    text = generate_latest(metrics.registry).decode()
    assert 'version="2026-01-01-abc"' not in text
    assert metrics.registry.get_sample_value("sentinel_model_info", {"model": "hazard",
                                                                     "version": "2026-02-01-def"}) == 1
    assert metrics.registry.get_sample_value("sentinel_model_trained_timestamp_seconds",
                                             {"model": "hazard"}) == 1_769_904_000.0
    with pytest.raises(ValidationError, match="snake_case"):
        metrics.set_model("Hazard Model", "v1", 0.0)


def test_forecast_margin_is_healthy_minus_losses_minus_upper_demand() -> None:
    metrics = Metrics()
    margin = metrics.set_forecast("3h", demand_gpus=900, demand_lower_gpus=850, demand_upper_gpus=1000,
                                  expected_lost_gpus=24.5, healthy_gpus=1016, now=START)
    assert margin == pytest.approx(-8.5)
    assert metrics.registry.get_sample_value("sentinel_forecast_capacity_margin_gpus", {"horizon": "3h"}) == -8.5
    assert metrics.registry.get_sample_value("sentinel_forecast_demand_gpus",
                                             {"horizon": "3h", "bound": "upper"}) == 1000
    with pytest.raises(ValidationError, match="horizon"):
        metrics.set_forecast("three hours", 1, 1, 1, 0, 1, START)
    with pytest.raises(ValidationError, match="interval"):
        metrics.set_forecast("1h", 10, 11, 12, 0, 1, START)


def _sample(node: str, ts: float, lost: int | None = None) -> TelemetrySample:
    gpus = [GpuReading(index=g, state=GpuState.LOST if g == lost else GpuState.OK,
                       temp_c=None if g == lost else 60.0) for g in range(8)]
    return TelemetrySample(node=node, ts=ts, gpus=gpus)


def test_a_pipeline_registry_passes_promtool_and_counts_fault_dead_letter_and_command(repo: Repository) -> None:
    clock = ManualClock(START)
    config = from_mapping({"policy": {"mode": "act", "breaker": {"max_fraction": 1.0}}})
    metrics = Metrics()
    pipeline = build_pipeline(config, clock, metrics, repo, actuator=DryRunActuator(clock))
    for r in range(3):
        clock.advance(10)
        for i in range(4):
            sample = _sample(f"node-{i}", clock.now(), lost=3 if (i == 0 and r == 2) else None)
            pipeline.transport.publish(TELEMETRY, sample.node, codec.encode(sample))
        pipeline.pump()
    pipeline.transport.publish(TELEMETRY, "node-1", b"{not json")
    pipeline.pump()
    clock.advance(20)
    pipeline.controller.step()  # quiet: the store-backed gauges refresh on their own timer
    metrics.set_model("hazard", "test-1", START - 86_400)
    metrics.set_forecast("1h", 10, 8, 12, 0.5, 32, clock.now())

    get = metrics.registry.get_sample_value
    assert get("sentinel_findings_total", {"kind": "gpu_lost", "severity": "fatal"}) == 1
    assert get("sentinel_node_risk", {"node": "node-0"}) == 1.0
    assert get("sentinel_dead_letters_total", {"topic": TELEMETRY}) == 1
    assert get("sentinel_decisions_total", {"action": "drain_requeue", "mode": "execute"}) == 1
    assert get("sentinel_commands_issued_total", {"action": "drain_requeue"}) == 1
    assert get("sentinel_commands_total", {"result": "dry_run"}) == 1
    assert get("sentinel_consumer_lag_messages", {"group": "sentinel-detector", "topic": TELEMETRY}) == 0
    assert get("sentinel_nodes", {"state": "reporting"}) == 4
    assert get("sentinel_nodes", {"state": "silent"}) == 0
    assert get("sentinel_open_incidents") == 1
    assert get("sentinel_breaker_open") == 0
    assert check_metrics(generate_latest(metrics.registry)) == ""


def test_nodes_that_stop_reporting_count_as_silent(repo: Repository) -> None:
    clock = ManualClock(START)
    metrics = Metrics()
    pipeline = build_pipeline(from_mapping({"detector": {"record_interval_s": 0}}), clock, metrics, repo)
    for i in range(3):
        pipeline.transport.publish(TELEMETRY, f"node-{i}", codec.encode(_sample(f"node-{i}", START)))
    pipeline.pump()
    clock.advance(600)
    pipeline.transport.publish(TELEMETRY, "node-0", codec.encode(_sample("node-0", clock.now())))
    pipeline.pump()
    pipeline.controller.refresh_gauges(clock.now())
    assert metrics.registry.get_sample_value("sentinel_nodes", {"state": "silent"}) == 2
    assert metrics.registry.get_sample_value("sentinel_nodes", {"state": "reporting"}) == 1
