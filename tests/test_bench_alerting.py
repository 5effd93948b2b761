"""`sentinel-bench alerting` against the real Prometheus: the baseline rules load, the exporter's pages are
parsable exposition in dcgm-exporter's format, and a short run times both systems on the same faults (thermal
with a precursor, GSP without)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sentinel.errors import ValidationError
from sentinel.sim.fleet import Fleet
from sentinel_bench.alerting import Options, plan, run_alerting
from sentinel_bench.promstack import baseline_rules, exposition
from tests.prom import tool


def test_the_baseline_rules_pass_promtool_at_the_benchmark_speed(tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(baseline_rules(speedup=20.0)))
    result = subprocess.run([tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[3000ms]" in path.read_text()  # one simulated minute at 20x


def test_the_exporter_pages_parse_and_keep_only_the_last_xid_of_a_lost_gpu() -> None:
    sc, truth = plan(Options(per_class=1, classes=("silent",), duration_s=1200, healthy_nodes=0, benign_nodes=0))
    fleet = Fleet(sc, truth)
    step = fleet.step()
    step.lost[0, 2] = True
    sample = fleet.samples(step)[0]
    page = exposition(sample, {2: 79})
    values = {(s.name, s.labels.get("gpu")): s.value for family in text_string_to_metric_families(page)
              for s in family.samples}
    assert values[("DCGM_FI_DEV_XID_ERRORS", "2")] == 79
    assert ("DCGM_FI_DEV_GPU_TEMP", "2") not in values  # the exporter can no longer read the lost GPU
    assert values[("DCGM_FI_DEV_GPU_TEMP", "0")] == sample.gpus[0].temp_c
    assert values[("node_infiniband_link_downed_total", None)] == 0


def test_bad_options_are_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="unknown fault class"):
        plan(Options(classes=("cosmic_rays",)))
    with pytest.raises(ValidationError, match="duration_s must exceed"):
        plan(Options(duration_s=600))


def test_a_short_run_times_both_systems_from_onset_to_alert() -> None:
    options = Options(per_class=1, classes=("thermal", "gsp"), precursor_s=(240.0, 300.0), duration_s=600,
                      step_wall_s=0.2, healthy_nodes=1, benign_nodes=1, model="")  # rules: no training here
    r = run_alerting(options)
    assert set(r["by_class"]) == {"thermal", "gsp"}
    for cls in ("thermal", "gsp"):
        row = r["by_class"][cls]
        assert row["faults"] == 1
        assert row["sentinel_detected"] == 1 and row["prometheus_detected"] == 1, row
    # Thermal: both see the climb before the GPU is lost; GSP: both only after the Xid, Prometheus at least one
    # scrape-and-evaluate later than a detector that reads the event as it arrives.
    assert r["by_class"]["thermal"]["sentinel_before_failure"] == 1
    assert r["by_class"]["thermal"]["prometheus_before_failure"] == 1
    gsp = r["by_class"]["gsp"]
    assert 0 <= gsp["sentinel_s_median"] <= gsp["prometheus_s_median"] <= 60
    assert r["sentinel_s_median"] is not None and r["prometheus_s_median"] is not None
    assert "GpuTempHigh" in r["prometheus_alerts"] and "GpuXidCritical" in r["prometheus_alerts"]
    assert r["sentinel_false_alert_nodes"] == 0


RATE_RULE_TEST = """
rule_files: [rules.yml]
evaluation_interval: 500ms
tests:
  - interval: 500ms  # one 10 s simulated step at 20x
    input_series:
      - series: 'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu="0",Hostname="fast"}'
        values: '0+5x20'  # 5 replays per simulated 10 s: 30 per simulated minute, above DCGM's 8
      - series: 'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu="0",Hostname="slow"}'
        values: '0+1x20'  # 6 per simulated minute: below
      - series: 'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{gpu="0",Hostname="fast"}'
        values: '0+1500x20'  # 150 per simulated second, above DCGM's 100
      - series: 'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{gpu="0",Hostname="slow"}'
        values: '0+500x20'  # 50 per simulated second: below
      - series: 'node_infiniband_symbol_error_total{device="mlx5_0",port="1",instance="fast"}'
        values: '0+200x20'  # 20 per simulated second, above NVSentinel's 10
      - series: 'node_infiniband_symbol_error_total{device="mlx5_0",port="1",instance="slow"}'
        values: '0+50x20'  # 5 per simulated second: below
    alert_rule_test:
      - eval_time: 5s
        alertname: GpuPcieReplayRate
        exp_alerts:
          - exp_labels: {severity: warning, gpu: "0", Hostname: fast}
      - eval_time: 5s
        alertname: GpuNvlinkCrcRate
        exp_alerts:
          - exp_labels: {severity: warning, gpu: "0", Hostname: fast}
      - eval_time: 5s
        alertname: IbSymbolErrors
        exp_alerts:
          - exp_labels: {severity: warning, device: mlx5_0, port: "1", instance: fast}
"""


def test_the_accelerated_rate_rules_fire_at_the_simulated_rates_the_tools_set(tmp_path: Path) -> None:
    """Prometheus's rate() is per wall second; at 20x one wall second is 20 simulated seconds."""
    (tmp_path / "rules.yml").write_text(json.dumps(baseline_rules(speedup=20.0)))
    (tmp_path / "test.yml").write_text(RATE_RULE_TEST)
    result = subprocess.run([tool("promtool"), "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
