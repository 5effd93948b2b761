"""The systemd units for the separate services carry the promised settings, and the loops they start speak
systemd's notify protocol (READY once, then the watchdog) over a real datagram socket."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from sentinel import codec, daemon
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.daemon import build_pipeline
from sentinel.events import TelemetrySample
from sentinel.obs.metrics import Metrics
from sentinel.store.repository import Repository
from sentinel.transport import TELEMETRY

UNITS = Path(__file__).resolve().parent.parent / "systemd"


def _settings(unit: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


@pytest.mark.parametrize(("unit", "verb"), [("sentinel-detector.service", "detector"),
                                            ("sentinel-controller.service", "controller"),
                                            ("sentinel.service", "run"), ("sentinel-agent.service", "agent")])
def test_service_units_are_supervised_hardened_and_configurable(unit: str, verb: str) -> None:
    s = _settings(UNITS / unit)
    assert s["ExecStart"][0].split()[1] == verb
    assert s["Type"] == ["notify"] and s["NotifyAccess"] == ["main"] and s["WatchdogSec"]
    assert s["Restart"] == ["always"] and s["RestartSec"]
    assert any(path.startswith("-/etc/sentinel/") for path in s["EnvironmentFile"])
    assert s["User"] == ["sentinel"] and s["NoNewPrivileges"] == ["yes"] and s["ProtectSystem"] == ["strict"]


def listen(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(path))
    server.settimeout(5)
    return server


def test_the_detector_loop_is_ready_after_its_first_poll_then_pets_the_watchdog(tmp_path: Path,
                                                                                repo: Repository) -> None:
    from sentinel.obs.sdnotify import notifier

    pipeline = build_pipeline(from_mapping({}), ManualClock(1_800_000_000.0), Metrics(), repo)
    for i in range(3):
        sample = TelemetrySample(node=f"n{i}", ts=1_800_000_000.0 + i)
        pipeline.transport.publish(TELEMETRY, sample.node, codec.encode(sample))
    stop = threading.Event()
    with listen(tmp_path / "notify.sock") as server:
        send = notifier({"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
        assert send is not None
        sent: list[str] = []

        def notify(state: str) -> None:
            send(state)
            sent.append(state)
            if len(sent) == 3:
                stop.set()

        pipeline.detector.run(stop, notify=notify)
        received = [server.recv(256).decode() for _ in range(3)]
    assert received == ["READY=1\nWATCHDOG=1", "WATCHDOG=1", "WATCHDOG=1"]
    assert pipeline.detector.samples_seen == 3


def test_sentinel_run_is_ready_after_its_first_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    config = from_mapping({"store": {"url": f"sqlite:///{tmp_path / 'run.db'}"},
                           "agent": {"collectors": ["host"], "interval_s": 0.05, "node": "node-1"}})
    with listen(tmp_path / "notify.sock") as server:
        pipeline = daemon.run(config, threading.Event(), max_cycles=2)
        received = [server.recv(256).decode() for _ in range(2)]
    assert received == ["READY=1\nWATCHDOG=1", "WATCHDOG=1"]
    assert pipeline.repo.counts()["nodes"] == 1
