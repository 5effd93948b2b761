"""The real Slurm cluster tests/services.sh starts (tests/slurm.sh): a fixture and a few helpers around it.

Tests that need it skip with a clear reason when SENTINEL_TEST_SLURM is absent (in CI its absence fails).
Every test starts from a clean cluster: no jobs, no drained node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

HARNESS = Path(__file__).resolve().parent / "slurm.sh"
NODES = ["node1", "node2", "node3", "node4"]
PYTHON = sys.executable
T = TypeVar("T")


@dataclass
class SlurmCluster:
    state_dir: Path
    conf: str

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "SLURM_CONF": self.conf}
        return subprocess.run(list(argv), capture_output=True, text=True, env=env, check=check, timeout=30)

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["name"]: n for n in json.loads(self.run("sinfo", "--json").stdout)["nodes"]}

    def jobs(self) -> dict[str, dict[str, Any]]:
        return {str(j["job_id"]): j for j in json.loads(self.run("squeue", "--json").stdout)["jobs"]}

    def drained(self, node: str) -> str | None:
        info = self.nodes()[node]
        return info["reason"] if "DRAIN" in info.get("state_flags", []) else None

    def submit(self, script: str, *options: str) -> str:
        """sbatch ``script`` (its text, from stdin) with ``options``; return the job id."""
        proc = subprocess.run(["sbatch", "--parsable", *options], input=script, capture_output=True, text=True,
                              env={**os.environ, "SLURM_CONF": self.conf}, check=True, timeout=30)
        return proc.stdout.strip().split(";")[0]

    def reset(self) -> None:
        """Cancel every job and return every node to service, whoever drained it (this cluster is the tests')."""
        self.run("scancel", "--quiet", "--partition=batch", check=False)
        wait_for(lambda: all(j["job_state"] in ("COMPLETED", "CANCELLED", "FAILED") for j in self.jobs().values()),
                 30, "jobs to end")
        for name, info in self.nodes().items():
            if "DRAIN" in info.get("state_flags", []) or info["state"] not in ("idle",):
                self.run("scontrol", "update", f"nodename={name}", "state=resume", check=False)
        wait_for(lambda: all(n["state"] == "idle" and not n.get("state_flags") for n in self.nodes().values()),
                 30, "all nodes idle")

    def ctld(self, action: str) -> None:
        """``stop`` or ``start`` slurmctld alone (it keeps its saved state)."""
        subprocess.run(["bash", str(HARNESS), f"{action}-ctld", str(self.state_dir)], check=True, timeout=60,
                       capture_output=True)


def wait_for(predicate: Callable[[], T], timeout_s: float, what: str, every_s: float = 0.1) -> T:
    """Poll a real service until ``predicate`` is truthy (the service's own time, not a sleep in our code)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


def cluster_from_env() -> SlurmCluster:
    """The cluster tests/services.sh started, reset; a skip (a failure in CI) when there is none."""
    state_dir = os.environ.get("SENTINEL_TEST_SLURM")
    conf = os.environ.get("SLURM_CONF")
    if not state_dir or not conf:
        if os.environ.get("CI"):
            pytest.fail("SENTINEL_TEST_SLURM is not set: tests/services.sh did not start Slurm")
        pytest.skip("no Slurm cluster: run through `make test` (tests/services.sh starts munged, slurmctld and "
                    "4 slurmd), or `bash tests/services.sh start slurm` and eval its `env`")
    cluster = SlurmCluster(Path(state_dir), conf)
    cluster.reset()
    return cluster
