"""`sentinel-bench soak` (issue 18), short: the detector and controller processes on a simulated fleet with a
fatal fault, on a tansu broker of its own and a fresh PostgreSQL schema; the keys the issue names, with real
numbers (the hour-long run at 10,000 GPUs is a benchmark: docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_a_short_soak_reports_memory_lag_losses_and_faults(pg_url: str) -> None:
    done = subprocess.run([sys.executable, "-m", "sentinel.benchmarks.cli", "soak", "--gpus", "400", "--duration",
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
    assert "bench: " in done.stderr  # progress on stderr
