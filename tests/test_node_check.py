"""`sentinel check`: one health check of the node for Slurm's HealthCheckProgram and NHC (issue 17), on the fake
NVML backend and the recorded sysfs tree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pynvml

from sentinel.testing import FakeNvml, healthy_fields
from sentinel_collectors.check import judge, read_node

SYSFS = str(Path(__file__).parent / "fixtures" / "sysfs")


def _fake(gpus: int = 8) -> FakeNvml:
    nvml = FakeNvml(gpus)
    for gpu in nvml.gpus:
        gpu.fields = healthy_fields()
    return nvml


def test_a_healthy_node_passes_every_check() -> None:
    gpus, error, nics = read_node(_fake(), SYSFS, read_nics=True)
    checks = judge(gpus, error, nics, expected_gpus=8, expected_ib_ports=1)
    assert all(c.ok is not False for c in checks), checks
    assert {c.name for c in checks} == {"nvidia driver", "gpu count", "gpus on the bus", "gpu memory",
                                        "recovery action", "infiniband ports"}


def test_a_missing_gpu_a_lost_gpu_and_a_pending_remap_each_fail_with_their_reason() -> None:
    nvml = _fake(7)
    nvml.gpus[2].lost = True
    nvml.gpus[5].fields[pynvml.NVML_FI_DEV_REMAPPED_PENDING] = 1
    nvml.gpus[6].fields[pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL] = 3
    gpus, error, nics = read_node(nvml, SYSFS, read_nics=False)
    failed = {c.name: c.detail for c in judge(gpus, error, nics, 8, 0) if c.ok is False}
    assert failed["gpu count"] == "7 of 8 expected"
    assert failed["gpus on the bus"] == "lost: GPU 2"
    assert "GPU 5: a row remap is pending" in failed["gpu memory"]
    assert "GPU 6: 3 uncorrectable ECC error(s)" in failed["gpu memory"]


def test_an_infiniband_port_down_fails_when_two_are_expected() -> None:
    gpus, error, nics = read_node(_fake(), SYSFS, read_nics=True)
    [ib] = [c for c in judge(gpus, error, nics, 8, 2) if c.name == "infiniband ports"]
    assert ib.ok is False and ib.detail == "1 of 2 expected ACTIVE"  # mlx5_1 is RoCE (Ethernet), ib0 a netdev


def test_without_the_driver_the_result_says_so_and_the_exit_code_is_one() -> None:
    """This host has no GPU: the command itself, as HealthCheckProgram would run it."""
    done = subprocess.run([sys.executable, "-m", "sentinel.cli", "check", "-o", "json"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["healthy"] is False
    [driver] = [c for c in result["checks"] if c["name"] == "nvidia driver"]
    assert driver["ok"] is False and driver["detail"].startswith("no NVIDIA driver")
    table = subprocess.run([sys.executable, "-m", "sentinel.cli", "check"], capture_output=True, text=True,
                           timeout=60)
    assert table.returncode == 1 and "ERROR: nvidia driver: no NVIDIA driver" in table.stdout
    assert "WARNING" not in table.stderr
