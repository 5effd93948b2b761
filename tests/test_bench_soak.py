"""`sentinel-bench soak` (issue 18), short: the detector and controller processes on a simulated fleet with a
fatal fault, on a tansu broker of its own and a fresh PostgreSQL schema; the keys the issue names, with real
numbers (the hour-long run at 10,000 GPUs is a benchmark: docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys

from sentinel_bench.soak import growth, trend_per_min


def test_a_short_soak_reports_memory_lag_losses_and_faults(pg_url: str) -> None:
    done = subprocess.run([sys.executable, "-m", "sentinel_bench.cli", "soak", "--gpus", "400", "--duration",
                           "50s", "--faults", "2", "--store", pg_url, "--json"],
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert data["nodes"] == 50 and data["store"] == "postgresql"
    assert data["samples_produced"] >= 50 * 40 and data["samples_lost"] == 0
    assert data["faults_injected"] == 2 and data["faults_found"] == 2, data["faults_missed"]
    assert data["dead_letters"] == 0 and data["store_bytes"] > 0
    for key in ("rss_growth_max", "lag_max", "lag_trend_per_min"):
        assert data[key] is not None, key
    assert set(data["rss_growth"]) >= {"detector", "controller"}
    assert set(data["cpu_pct"]) >= {"detector", "controller", "broker"} and data["cpu_pct"]["detector"] > 0
    assert "bench: " in done.stderr  # progress on stderr


def test_the_lag_trend_is_not_decided_by_one_burst_at_the_end() -> None:
    flat = [(t * 10.0, 0.0 if t % 7 else 2000.0) for t in range(90)]  # bursts that fall back to zero
    assert trend_per_min(flat) == 0.0
    assert trend_per_min([*flat, (900.0, 2500.0)]) == 0.0  # one burst at the last sample
    climbing = [(t * 10.0, 50.0 * t + (2000.0 if t % 7 == 0 else 0.0)) for t in range(90)]
    assert abs(trend_per_min(climbing) - 300.0) < 1.0  # 50 messages per 10 s sample, the bursts ignored


def test_rss_growth_compares_the_first_and_last_minutes_after_the_reference() -> None:
    series = [(t * 10.0, 100.0) for t in range(60)] + [(600.0 + t * 10.0, 110.0) for t in range(60)]
    assert growth(series, 600.0) == 0.0  # before the reference point does not count
    assert abs(growth(series[:-1] + [(1190.0, 200.0)], 0.0) - 0.10) < 1e-9  # a spike at the end: the median
    assert growth([], 0.0) is None
