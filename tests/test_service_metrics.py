"""Each service's /metrics as Prometheus scrapes it: the agent, a detector and a controller on the real broker
(tansu), each with its own registry and HTTP server, pass `promtool check metrics` and show what happened:
a lost GPU becomes a finding, a node risk and a dry-run command; a malformed message a dead letter."""

from __future__ import annotations

import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from sentinel import codec
from sentinel.config import from_mapping
from sentinel.daemon import run_agent, run_controller, run_detector
from sentinel.events import GpuReading, GpuState, TelemetrySample
from sentinel.store.engine import make_engine, upgrade
from sentinel.store.repository import Repository
from sentinel.transport import TELEMETRY
from sentinel.transport.kafka import KafkaTransport
from sentinel_bench.brokers import Tansu, free_port
from tests.prom import check_metrics
from tests.test_agent_outage import _slots

START = 1_800_000_000.0


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def _value(text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                return float(sample.value)
    return None


def test_every_service_serves_lint_clean_metrics_that_count_what_happened(tmp_path: Path) -> None:
    broker = Tansu(tmp_path)
    broker.start()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(make_engine(url))
    repo = Repository(make_engine(url))
    ports = {name: free_port() for name in ("agent", "detector", "controller")}
    kafka = {"bootstrap": broker.bootstrap, "session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
    key = tmp_path / "command.key"
    key.write_text("k" * 64 + "\n")
    key.chmod(0o600)  # the separate controller refuses to run without a private command-signing key

    def config(service: str) -> object:
        return from_mapping({
            "transport": {"kind": "kafka", "kafka": kafka}, "store": {"url": url},
            "security": {"key_file": str(key)},
            "policy": {"mode": "act", "breaker": {"max_fraction": 1.0}}, "detector": {"record_interval_s": 0},
            "metrics": {"listen": f"127.0.0.1:{ports[service]}"},
            "agent": {"node": "agent-node", "interval_s": 0.2, "spool_path": str(tmp_path / "agent.spool"),
                      "metrics_listen": f"127.0.0.1:{ports['agent']}"},
        })

    stop = threading.Event()
    threads = [threading.Thread(target=run_detector, args=(config("detector"), stop)),
               threading.Thread(target=run_controller, args=(config("controller"), stop)),
               threading.Thread(target=run_agent, args=(config("agent"), stop),
                                kwargs={"slots": _slots("agent-node")})]
    producer = KafkaTransport(broker.bootstrap)
    try:
        for thread in threads:
            thread.start()
        for r in range(1, 4):
            gpus = [GpuReading(index=g, state=GpuState.LOST if (g == 2 and r == 3) else GpuState.OK,
                               temp_c=None if (g == 2 and r == 3) else 55.0) for g in range(8)]
            producer.publish(TELEMETRY, "node-a", codec.encode(TelemetrySample(node="node-a", ts=START + r, gpus=gpus)))
        producer.publish(TELEMETRY, "node-b", b"\xff not a record")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not [c for c in repo.table("commands") if c["status"] != "pending"]:
            time.sleep(0.3)
        time.sleep(0.5)  # let the gauges of the last round settle
        texts = {name: _scrape(port) for name, port in ports.items()}
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        producer.close()
        broker.stop()

    for name, text in texts.items():
        assert check_metrics(text) == "", f"{name}: promtool complaints"
    detector, controller, agent = texts["detector"], texts["controller"], texts["agent"]
    assert _value(detector, "sentinel_findings_total", {"kind": "gpu_lost", "severity": "fatal"}) == 1
    assert _value(detector, "sentinel_node_risk", {"node": "node-a"}) == 1.0
    assert _value(detector, "sentinel_dead_letters_total", {"topic": TELEMETRY}) == 1
    assert _value(detector, "sentinel_consumer_lag_messages", {"group": "sentinel-detector"}) is not None
    assert _value(controller, "sentinel_commands_issued_total", {"action": "drain_requeue"}) == 1
    assert _value(controller, "sentinel_commands_total", {"result": "dry_run"}) == 1
    assert _value(controller, "sentinel_breaker_open") == 0
    assert (_value(agent, "sentinel_agent_samples_total") or 0) >= 1
    assert not any(t.is_alive() for t in threads), "every service stops (and closes its /metrics) on stop"
    # Each process exports its own services' metrics and the common ones, nothing of another service (issue 39)
    families = {name: {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
                for name, text in texts.items()}
    common = {"sentinel_messages_published_total", "sentinel_dead_letters_total", "sentinel_consumer_lag_messages"}
    own = {"detector": {"sentinel_findings_total", "sentinel_node_risk"},
           "controller": {"sentinel_decisions_total", "sentinel_action_steps_total", "sentinel_forecast_healthy_gpus"},
           "agent": {"sentinel_agent_samples_total", "sentinel_spool_messages"}}
    for name, names in families.items():
        assert common | own[name] <= names, name
        others = set().union(*(own[other] for other in own if other != name))
        assert not names & others, (name, sorted(names & others))
