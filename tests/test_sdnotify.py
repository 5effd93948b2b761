"""The agent tells systemd READY after its first sample and pets the watchdog after every sample."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from sentinel.clock import SystemClock
from sentinel.obs.metrics import Metrics
from sentinel.obs.sdnotify import notifier
from sentinel_collectors.agent import Agent, Slot
from sentinel_collectors.host import HostCollector


def test_no_notify_socket_means_no_notifier() -> None:
    assert notifier({}) is None


def test_states_reach_a_real_notify_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        server.settimeout(5)
        notify = notifier({"NOTIFY_SOCKET": str(path)})
        assert notify is not None
        agent = Agent("gpu-node-001", [Slot("host", "host", HostCollector().read, 0.01)], lambda items: None,
                      Metrics(), SystemClock(), interval_s=0.01, notify=notify)
        agent.run(threading.Event(), max_cycles=3)
        received = [server.recv(256).decode() for _ in range(3)]
    assert received == ["READY=1\nWATCHDOG=1", "WATCHDOG=1", "WATCHDOG=1"]


def test_a_dead_notify_socket_never_stops_the_agent(tmp_path: Path) -> None:
    notify = notifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert notify is not None
    notify("READY=1")  # logs a warning, raises nothing
