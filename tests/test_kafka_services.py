"""Must-show for the Kafka backbone, against the real tansu broker and the real PostgreSQL store:

- two detector processes split the partitions; `kill -9` of one mid-stream: the other takes over, no finding is
  lost, and the controller issues no duplicate command;
- a restarted detector resumes from committed offsets: no gap, no duplicate effect;
- 10,000 malformed messages mixed into the stream are all dead-lettered with a reason, the services keep
  running, and the findings of the valid messages are unchanged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sentinel import codec
from sentinel.config import from_mapping
from sentinel.daemon import run_controller, run_detector
from sentinel.events import DeadLetter, GpuReading, GpuState, LogEvent, LogKind, TelemetrySample
from sentinel.store.repository import Repository
from sentinel.transport import DEAD_LETTERS, LOGS, TELEMETRY
from sentinel.transport.kafka import KafkaTransport
from sentinel_bench.brokers import Tansu
from tests.pg import fresh_postgres_store

NODES = [f"gpu-node-{i:03d}" for i in range(1, 41)]
LOST_AT = 15  # round in which the first ten nodes lose GPU 3
XID_AT = 45  # round in which nodes 11-20 log Xid 79
START = 1_800_000_000.0


def _config(broker: Tansu, pg_url: str, tmp_path: Path) -> tuple[dict, Path]:
    key = tmp_path / "command.key"
    key.write_text("k" * 64 + "\n")
    key.chmod(0o600)  # the separate services refuse to run without a private command-signing key
    raw = {
        "security": {"key_file": str(key)},
        "transport": {"kind": "kafka", "kafka": {
            "bootstrap": broker.bootstrap, "session_timeout_ms": 6000, "heartbeat_interval_ms": 1000,
            "partitions": {"telemetry": 4, "logs": 4, "findings": 2}}},
        "store": {"url": pg_url},
        "policy": {"mode": "act", "breaker": {"max_fraction": 1.0}},
        "detector": {"replay_messages": 2000, "record_interval_s": 0},
    }
    path = tmp_path / "sentinel.toml"
    lines = [
        "[transport]", 'kind = "kafka"', "[transport.kafka]", f'bootstrap = "{broker.bootstrap}"',
        "session_timeout_ms = 6000", "heartbeat_interval_ms = 1000",
        "[transport.kafka.partitions]", "telemetry = 4", "logs = 4", "findings = 2",
        "[store]", f'url = "{pg_url}"', "[policy]", 'mode = "act"', "[policy.breaker]", "max_fraction = 1.0",
        "[detector]", "replay_messages = 2000", "record_interval_s = 0", "[security]", f'key_file = "{key}"',
    ]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)  # it holds the store's password: a config others can read is refused
    return raw, path


def _round(transport: KafkaTransport, r: int) -> None:
    batch = []
    for i, node in enumerate(NODES):
        lost = 3 if (i < 10 and r >= LOST_AT) else None
        gpus = [GpuReading(index=g, pci_bus_id=f"00000000:{0x18 + g:02X}:00.0",
                           state=GpuState.LOST if g == lost else GpuState.OK,
                           temp_c=None if g == lost else 60.0 + g) for g in range(8)]
        sample = TelemetrySample(node=node, ts=START + r, seq=r, gpus=gpus)
        batch.append((TELEMETRY, node, codec.encode(sample)))
        if 10 <= i < 20 and r == XID_AT:
            event = LogEvent(node=node, ts=START + r, kind=LogKind.XID, xid=79, pci_bus_id="0000:1b:00",
                             message="NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', GPU has fallen off the bus.")
            batch.append((LOGS, node, codec.encode(event)))
    transport.publish_batch(batch)


def _expected() -> set[tuple[str, str]]:
    return {("gpu-lost", n) for n in NODES[:10]} | {("xid-catalog", n) for n in NODES[10:20]}


def _wait_for(repo: Repository, want: set[tuple[str, str]], commands: int, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = {(f["rule"], f["node"]) for f in repo.table("findings")}
        done = [c for c in repo.table("commands") if c["status"] != "pending"]
        if want <= found and len(done) >= commands:
            return
        time.sleep(0.5)


@dataclass
class Stack:
    broker: Tansu
    repo: Repository
    raw: dict
    path: Path
    stop: threading.Event
    producer: KafkaTransport
    controller: threading.Thread


@pytest.fixture
def stack(tmp_path: Path, pg_url: str) -> Iterator[Stack]:
    """A fresh broker and store, the controller running in a thread, and a producer; all stopped afterwards."""
    broker = Tansu(tmp_path)
    broker.start()
    repo = fresh_postgres_store(pg_url)
    raw, path = _config(broker, pg_url, tmp_path)
    stop = threading.Event()
    controller = threading.Thread(target=run_controller, args=(from_mapping(raw), stop))
    controller.start()
    producer = KafkaTransport(broker.bootstrap)
    try:
        yield Stack(broker, repo, raw, path, stop, producer, controller)
    finally:
        stop.set()
        controller.join(30)
        producer.close()
        broker.stop()


def _detector_process(config_path: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "sentinel.cli", "detector", "--config", str(config_path)],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _assert_effects_exactly_once(repo: Repository) -> None:
    findings = repo.table("findings")
    assert {(f["rule"], f["node"]) for f in findings} == _expected()
    assert len(findings) == len({f["id"] for f in findings}) == 20  # one finding per fault, none lost
    commands = repo.table("commands")
    assert sorted(c["node"] for c in commands) == sorted(NODES[:20])  # one command per faulty node, no duplicate
    drains = [d for d in repo.table("decisions") if not d["action"].startswith("request_")]  # less the operator queue
    assert Counter(d["incident_id"] for d in drains).most_common(1)[0][1] == 1


@pytest.mark.postgres
def test_a_killed_detector_member_is_replaced_without_losing_findings_or_doubling_commands(
        tmp_path: Path, stack: Stack) -> None:
    repo, producer = stack.repo, stack.producer
    members = [_detector_process(stack.path, tmp_path / f"detector-{i}.log") for i in range(2)]
    try:
        time.sleep(8)  # both members join and split the partitions
        for r in range(1, 61):
            _round(producer, r)
            if r == 30:
                members[0].send_signal(signal.SIGKILL)  # mid-stream, no goodbye to the group
            time.sleep(0.1)
        _wait_for(repo, _expected(), commands=20)
        assert members[1].poll() is None, "the surviving member must still be running"
        _assert_effects_exactly_once(repo)
    finally:
        for member in members:
            if member.poll() is None:
                member.send_signal(signal.SIGTERM)
                member.wait(20)


@pytest.mark.postgres
def test_a_restarted_detector_resumes_from_its_committed_offsets(tmp_path: Path, stack: Stack) -> None:
    repo, producer = stack.repo, stack.producer
    first = _detector_process(stack.path, tmp_path / "first.log")
    for r in range(1, 31):
        _round(producer, r)
    _wait_for(repo, {("gpu-lost", n) for n in NODES[:10]}, commands=10)
    first.send_signal(signal.SIGTERM)
    assert first.wait(30) == 0
    for r in range(31, 61):
        _round(producer, r)
    second = _detector_process(stack.path, tmp_path / "second.log")
    try:
        _wait_for(repo, _expected(), commands=20)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
    _assert_effects_exactly_once(repo)


@pytest.mark.postgres
def test_ten_thousand_malformed_messages_are_dead_lettered_and_change_nothing(stack: Stack) -> None:
    repo, producer = stack.repo, stack.producer
    detector = threading.Thread(target=run_detector, args=(from_mapping(stack.raw), stack.stop))
    detector.start()
    bad_kinds = [b"\xff\xfe", b"{}", b'{"type":"telemetry","node":"x y","ts":1}', b"[1,2,3]",
                 b'{"type":"telemetry","node":"n1","ts":1,"gpus":[{"index":0,"temp_c":1e999}]}']
    try:
        for r in range(1, 61):
            _round(producer, r)
            bad = [((TELEMETRY, LOGS)[k % 2], NODES[k % 40], bad_kinds[k % len(bad_kinds)] + str(r).encode())
                   for k in range(167 if r < 60 else 10_000 - 167 * 59)]
            producer.publish_batch(bad)
        _wait_for(repo, _expected(), commands=20)
        assert detector.is_alive() and stack.controller.is_alive(), "services must keep running"
        _assert_effects_exactly_once(repo)
        consumer = producer.consumer(f"dlq-{uuid.uuid4().hex[:6]}", [DEAD_LETTERS])
        letters: list[DeadLetter] = []
        deadline = time.monotonic() + 60
        while len(letters) < 10_000 and time.monotonic() < deadline:
            letters += [codec.decode_as(m.value, DeadLetter) for m in consumer.poll(5000, timeout_s=1.0)]
        consumer.close()
        assert len(letters) == 10_000
        assert all(letter.reason and letter.source_topic in (TELEMETRY, LOGS) for letter in letters)
        assert len({(x.source_topic, x.source_partition, x.source_offset) for x in letters}) == 10_000
    finally:
        stack.stop.set()
        detector.join(30)


def test_services_refuse_the_embedded_transport() -> None:
    from sentinel.errors import ConfigError

    with pytest.raises(ConfigError, match='separate services need "kafka"'):
        run_detector(from_mapping({"store": {"url": "sqlite:///" + os.devnull}}), threading.Event())
