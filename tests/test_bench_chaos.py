"""A short `sentinel-bench chaos` on the real services make test starts: tansu on S3 (its own), PostgreSQL (a
fresh schema), the 4-node Slurm test cluster, a detector and two controller processes killed and restarted,
one broker restart and one slurmctld restart. Every effect must still happen exactly once.

The full run (300 s, 24 kills, 3 broker restarts, 12 nodes) is the benchmark in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.slurm_cluster import SlurmCluster


def test_a_short_chaos_run_drains_every_fault_once_and_never_past_the_breaker(slurm: SlurmCluster,
                                                                                pg_url: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "sentinel_bench.cli", "chaos", "--slurm-dir",
                           str(slurm.state_dir), "--store", pg_url, "--duration", "45", "--kills", "6",
                           "--broker-restarts", "1", "--slurmctld-restarts", "1", "--seed", "3", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["kills"] >= 5 and result["broker_restarts"] == 1 and result["slurmctld_restarts"] == 1
    assert result["faults"] >= 2 and result["drains_expected"] >= 1
    for key in ("drains_missing", "drains_duplicated", "requeues_duplicated", "false_drains", "breaker_exceeded",
                "findings_lost"):
        assert result[key] == 0, (key, result)
    assert all(slurm.drained(node) is None for node in slurm.nodes())  # the bench resumed what it drained
