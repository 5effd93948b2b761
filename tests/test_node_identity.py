"""Per-node identity on telemetry (issue 38, item 1): with a fleet key the detector accepts a telemetry or log
message only when it is signed with the key of the node it names. On e5bcaaa anyone who could produce to the
logs topic could send an Xid 79 for any node. Real detector and agent built from the config, memory transport,
real SQLite store; keys made by `sentinel keygen`."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel import codec
from sentinel.actuator.sealed import inside
from sentinel.cli.main import main
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.daemon import build_agent, build_detector
from sentinel.events import DeadLetter, Finding, GpuReading, LogEvent, LogKind, TelemetrySample
from sentinel.obs.metrics import Metrics
from sentinel.store.repository import Repository
from sentinel.transport import DEAD_LETTERS, FINDINGS, LOGS, TELEMETRY
from sentinel.transport.memory import MemoryTransport
from sentinel.transport.node_auth import NodeSigner, node_secret
from sentinel_collectors.agent import Slot

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."


def _keys(tmp_path: Path) -> tuple[Path, Path]:
    fleet, node_a = tmp_path / "fleet.key", tmp_path / "gpu-a.key"
    assert main(["keygen", str(fleet)]) == 0
    assert main(["keygen", str(node_a), "--node", "gpu-a", "--fleet-key", str(fleet)]) == 0
    return fleet, node_a


def _xid(node: str) -> bytes:
    return codec.encode(LogEvent(node=node, ts=100.0, kind=LogKind.XID, message=XID79, xid=79,
                                 pci_bus_id="0000:3b:00"))


def test_the_detector_refuses_telemetry_not_signed_by_the_node_it_names(tmp_path: Path, repo: Repository) -> None:
    fleet, node_a = _keys(tmp_path)
    config = from_mapping({"security": {"fleet_key_file": str(fleet)}})
    transport = MemoryTransport()
    metrics = Metrics()
    detector = build_detector(config, ManualClock(100.0), metrics, repo, transport)
    a = NodeSigner(node_a.read_text().strip().encode())
    transport.publish(LOGS, "gpu-b", a.frame(_xid("gpu-b")))  # a's key, b's name on the message: forged
    transport.publish(LOGS, "gpu-a", a.frame(_xid("gpu-b")))  # a's key and name, a record naming b
    transport.publish(LOGS, "gpu-b", _xid("gpu-b"))  # not signed at all
    transport.publish(LOGS, None, a.frame(_xid("gpu-a")))  # no node on the message
    transport.publish(LOGS, "gpu-a", a.frame(_xid("gpu-a")))  # genuine
    detector.step()
    findings = [inside(m.value, Finding) for m in transport.consumer("f", [FINDINGS]).poll(10)]
    assert [(f.node, f.rule) for f in findings] == [("gpu-a", "xid-catalog")]
    letters = [codec.decode_as(m.value, DeadLetter) for m in transport.consumer("d", [DEAD_LETTERS]).poll(10)]
    assert [letter.reason.split(":")[0] for letter in letters] == ["bad_mac", "node_mismatch", "unauthenticated",
                                                                  "no_node"]
    for reason in ("bad_mac", "node_mismatch", "unauthenticated", "no_node"):
        assert metrics.registry.get_sample_value("sentinel_telemetry_refused_total", {"reason": reason}) == 1


def test_an_agent_with_its_node_key_is_accepted_by_a_detector_with_the_fleet_key(tmp_path: Path,
                                                                                repo: Repository) -> None:
    fleet, node_a = _keys(tmp_path)
    config = from_mapping({"agent": {"node": "gpu-a", "node_key_file": str(node_a)},
                           "security": {"fleet_key_file": str(fleet)}})
    transport = MemoryTransport()
    clock = ManualClock(100.0)
    gpus = Slot("fake-nvml", "gpus", lambda: [GpuReading(index=0, temp_c=50.0)], 1.0)
    agent = build_agent(config, clock, Metrics(), lambda items: [transport.publish(*i) for i in items], [gpus])
    agent.cycle()
    detector = build_detector(config, clock, Metrics(), repo, transport)
    detector.step()
    assert "gpu-a" in detector.windows and detector.samples_seen == 1
    assert transport.consumer("d", [DEAD_LETTERS]).poll(10) == []


def test_without_a_fleet_key_a_signed_message_is_still_read(repo: Repository) -> None:
    """A detector not (yet) configured for node identity takes what the agents sign: the frame is stripped."""
    transport = MemoryTransport()
    detector = build_detector(from_mapping({}), ManualClock(100.0), Metrics(), repo, transport)
    signed = NodeSigner(node_secret(b"k" * 32, "gpu-a")).frame(
        codec.encode(TelemetrySample(node="gpu-a", ts=100.0, gpus=[GpuReading(index=0)])))
    transport.publish(TELEMETRY, "gpu-a", signed)
    detector.step()
    assert detector.samples_seen == 1


def test_keygen_prints_a_key_to_stdout_with_a_dash(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keygen", "-"]) == 0
    key = capsys.readouterr().out.strip()
    assert len(key) == 64 and int(key, 16) >= 0


def test_a_node_key_needs_the_fleet_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keygen", str(tmp_path / "x.key"), "--node", "gpu-a"]) != 0
    assert "--node and --fleet-key go together" in capsys.readouterr().err
    assert not (tmp_path / "x.key").exists()
