"""The host collector reads procfs (a recorded tree here, the live /proc too) and never judges."""

from __future__ import annotations

import shutil
from pathlib import Path

from sentinel import codec
from sentinel.clock import ManualClock
from sentinel.events import TelemetrySample
from sentinel.obs.metrics import Metrics
from sentinel.transport import TELEMETRY
from sentinel_collectors.agent import Agent, Slot
from sentinel_collectors.host import HostCollector

FIXTURE = Path(__file__).parent / "fixtures" / "proc"


def test_recorded_proc_tree_is_read_into_a_host_reading() -> None:
    reading = HostCollector(FIXTURE).read()
    assert reading.boot_id == "6f1c9b0e-3c1a-4c55-9d1e-1b0a2f6e7d21"
    assert reading.uptime_s == 354123.45 and reading.load1 == 12.5
    assert reading.mem_total_bytes == 2113634304 * 1024 and reading.mem_available_bytes == 1500000000 * 1024
    assert reading.cpu_util_pct is None  # needs two reads


def test_cpu_utilisation_comes_from_the_delta_between_reads(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    shutil.copytree(FIXTURE, root)
    collector = HostCollector(root)
    collector.read()
    (root / "stat").write_text("cpu  1300 0 600 8500 600 0 0 0 0 0\n")  # +400 busy, +600 idle+iowait
    assert collector.read().cpu_util_pct == 40.0
    (root / "stat").write_text("cpu  10 0 5 80 5 0 0 0 0 0\n")  # counters reset (reboot): no number, no crash
    assert collector.read().cpu_util_pct is None


def test_live_proc_reads_on_this_machine() -> None:
    reading = HostCollector().read()
    assert len(reading.boot_id) >= 32 and reading.mem_total_bytes and reading.mem_total_bytes > 0


def test_a_failing_collector_is_reported_in_the_sample_backs_off_and_the_others_go_on(tmp_path: Path) -> None:
    clock, metrics, sent = ManualClock(), Metrics(), []
    broken = Slot("host", "host", HostCollector(tmp_path / "missing").read, interval_s=1.0)
    working = Slot("host-ok", "host", HostCollector(FIXTURE).read, interval_s=1.0)
    agent = Agent("gpu-node-001", [broken, working], sent.extend, metrics, clock, interval_s=1.0)
    errors_by_cycle = []
    for _ in range(8):
        sample, _ = agent.cycle()
        errors_by_cycle.append("host" in sample.collector_errors)
        assert sample.host is not None and sample.host.boot_id  # the working collector still reports
        clock.advance(1.0)
    # tried at t=0, 1 (after 1 s), 3 (after 2 s), 7 (after 4 s): exponential backoff
    assert errors_by_cycle == [True, True, False, True, False, False, False, True]
    assert "FileNotFoundError" in codec.decode_as(sent[0][2], TelemetrySample).collector_errors["host"]
    assert [codec.decode_as(v, TelemetrySample).seq for t, _, v in sent if t == TELEMETRY] == list(range(1, 9))
    assert metrics.collector_errors.labels("host")._value.get() == 4
