"""No poison message stops a service (issue 38, item 3). Each kind of bad message — forged, unknown id,
schema-valid but inconsistent, oversized, truncated, and one whose handling raises — is fed to the detector, the
controller and the actuator; each ends as a dead letter with its reason and a commit, and the good message behind
it is handled. On e5bcaaa a forged result with an unknown command id crash-looped the controller.

Real services over the memory transport and a real SQLite store; the one injected fault (a handler that raises)
stands in for any bug a message could trigger."""

from __future__ import annotations

import msgspec
import pytest

from sentinel import codec
from sentinel.actuator.sealed import Sealer, inside
from sentinel.actuator.signing import CommandSigner, SigningKey, process_key
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.detector.service import Detector
from sentinel.events import (
    ActionKind,
    ActionResult,
    Command,
    DeadLetter,
    Finding,
    GpuReading,
    GpuState,
    LogEvent,
    LogKind,
    SignedCommand,
    Step,
    StepStatus,
    TelemetrySample,
)
from sentinel.obs.metrics import Metrics
from sentinel.store.repository import Repository
from sentinel.transport import COMMANDS, DEAD_LETTERS, FINDINGS, RESULTS, TELEMETRY
from sentinel.transport.deadletter import MAX_PAYLOAD_BYTES
from sentinel.transport.memory import MemoryTransport
from tests.test_effects import Rig, fatal

OTHER_KEY = SigningKey(b"not-the-service-key-" + b"x" * 32, "attacker")
HUGE = b'{"type":"telemetry","v":1,"node":"gpu-01","ts":1.0,"collector_errors":{"x":"' + b"a" * (5 << 20) + b'"}}'


def _letters(transport: MemoryTransport, group: str) -> list[DeadLetter]:
    return [codec.decode_as(m.value, DeadLetter) for m in transport.consumer(group, [DEAD_LETTERS]).poll(100)]


# ----- detector --------------------------------------------------------------------------------------------------

def _sample(node: str, **gpu: object) -> TelemetrySample:
    return TelemetrySample(node=node, ts=100.0, gpus=[GpuReading(index=0, **gpu)])  # type: ignore[arg-type]


DETECTOR_BAD = {
    "forged": codec.encode(fatal("gpu-01", 100.0)),  # a finding where telemetry belongs
    "unknown_id": codec.encode(LogEvent(node="gpu-01", ts=100.0, kind=LogKind.XID, message="Xid 65000", xid=65000)),
    "inconsistent": codec.encode(TelemetrySample(node="gpu-01", ts=100.0,
                                                 gpus=[GpuReading(index=0), GpuReading(index=0)])),
    "oversized": HUGE,
    "truncated": codec.encode(_sample("gpu-01"))[:40],
}


@pytest.mark.parametrize("kind", [*DETECTOR_BAD, "raises"])
def test_the_detector_survives_a_poison_message(repo: Repository, kind: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    transport = MemoryTransport()
    detector = Detector(transport, repo, from_mapping({}).detector, Metrics(), ManualClock(100.0))
    if kind == "raises":
        real = detector.on_sample

        def broken(sample, now):  # type: ignore[no-untyped-def]
            if sample.node == "gpu-01":
                raise KeyError("a bug this message triggers")
            return real(sample, now)

        monkeypatch.setattr(detector, "on_sample", broken)
        bad = codec.encode(_sample("gpu-01"))
    else:
        bad = DETECTOR_BAD[kind]
    transport.publish(TELEMETRY, "gpu-01", bad)
    transport.publish(TELEMETRY, "gpu-02", codec.encode(_sample("gpu-02", state=GpuState.LOST)))
    detector.step()
    assert transport.pending(TELEMETRY) == 0  # committed past both
    findings = [inside(m.value, Finding) for m in transport.consumer("f", [FINDINGS]).poll(10)]
    assert [(f.node, f.rule) for f in findings] == [("gpu-02", "gpu-lost")]  # the good one was handled
    letters = _letters(transport, "d")
    if kind != "unknown_id":  # an unknown Xid is recorded, not refused
        assert len(letters) == 1 and letters[0].payload == bad[:MAX_PAYLOAD_BYTES] and letters[0].reason
    if kind == "raises":
        assert "handling failed: KeyError" in letters[0].reason
        assert detector.metrics.registry.get_sample_value(
            "sentinel_poison_messages_total", {"topic": TELEMETRY, "error": "KeyError"}) == 1


# ----- controller ------------------------------------------------------------------------------------------------

def _result(command_id: str, node: str, incident: str) -> ActionResult:
    return ActionResult(id=f"{command_id}:verify", command_id=command_id, incident_id=incident, node=node, ts=1.0,
                        step=Step.VERIFY, status=StepStatus.OK, detail="done")


@pytest.mark.parametrize("kind", ["forged", "unknown_id", "inconsistent", "oversized", "truncated", "raises"])
def test_the_controller_survives_a_poison_message(repo: Repository, kind: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(repo)
    topic = FINDINGS
    if kind == "forged":
        bad = Sealer(OTHER_KEY, Finding).seal(fatal("gpu-node-001", rig.clock.now()))
    elif kind == "unknown_id":
        topic, bad = RESULTS, Sealer(process_key(), ActionResult).seal(_result("nope:cmd", "gpu-node-001", "nope"))
    elif kind == "inconsistent":  # a real command's id, another node
        rig.find("gpu-node-002")
        rig.controller.step()
        [command_id] = [c["id"] for c in repo.table("commands")]
        incident = repo.table("commands")[0]["incident_id"]
        topic, bad = RESULTS, Sealer(process_key(), ActionResult).seal(_result(command_id, "gpu-node-009", incident))
    elif kind == "oversized":
        bad = HUGE
    elif kind == "truncated":
        bad = Sealer(process_key(), Finding).seal(fatal("gpu-node-001", rig.clock.now()))[:50]
    else:
        from sentinel.policy import engine

        real = engine.decide

        def broken(incident, finding, *args, **kw):  # type: ignore[no-untyped-def]
            if finding.node == "gpu-node-001":
                raise ZeroDivisionError("a bug this finding triggers")
            return real(incident, finding, *args, **kw)

        monkeypatch.setattr(engine, "decide", broken)
        bad = Sealer(process_key(), Finding).seal(fatal("gpu-node-001", rig.clock.now()))
    rig.transport.publish(topic, "gpu-node-001", bad)
    rig.find("gpu-node-005")
    rig.controller.step()
    assert rig.transport.pending(FINDINGS) == 0 and rig.transport.pending(RESULTS) == 0
    assert "gpu-node-005" in {c["node"] for c in repo.table("commands")}  # the good finding was judged
    assert "gpu-node-001" not in {c["node"] for c in repo.table("commands")}
    letters = _letters(rig.transport, "d")
    assert len(letters) == 1 and letters[0].payload == bad[:MAX_PAYLOAD_BYTES] and letters[0].reason
    if kind == "raises":
        assert "handling failed: ZeroDivisionError" in letters[0].reason
        assert all(i["node"] != "gpu-node-001" for i in repo.table("incidents", "id"))  # rolled back whole


# ----- actuator --------------------------------------------------------------------------------------------------

def _command(rig: Rig, node: str) -> Command:
    now = rig.clock.now()
    return Command(id=f"inc-{node}:d:cmd", decision_id=f"inc-{node}:d", incident_id=f"inc-{node}", node=node,
                   action=ActionKind.DRAIN_REQUEUE, ts=now, expires_ts=now + 300,
                   drain_reason=f"sentinel: inc-{node} poison test")


@pytest.mark.parametrize("kind", ["forged", "unknown_id", "inconsistent", "oversized", "truncated", "raises"])
def test_the_actuator_survives_a_poison_message(repo: Repository, kind: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(repo)
    signer = CommandSigner(process_key())
    target = _command(rig, "gpu-node-001")
    if kind == "forged":
        bad = codec.encode(CommandSigner(OTHER_KEY).seal(target))
    elif kind == "unknown_id":
        envelope = signer.seal(target)
        bad = codec.encode(msgspec.structs.replace(envelope, key_id="0123456789abcdef"))
    elif kind == "inconsistent":  # validly signed, but the command inside disagrees with its envelope
        envelope = signer.seal(target)
        moved = msgspec.structs.replace(target, expires_ts=target.expires_ts + 60)
        bad = codec.encode(SignedCommand(key_id=envelope.key_id, nonce=envelope.nonce, expires_ts=envelope.expires_ts,
                                         payload=codec.encode(moved), signature=envelope.signature))
    elif kind == "oversized":
        bad = HUGE
    elif kind == "truncated":
        bad = codec.encode(signer.seal(target))[:60]
    else:
        real = rig.actuator.journal.accept

        def broken(command, now, envelope):  # type: ignore[no-untyped-def]
            if command.node == "gpu-node-001":
                raise ValueError("a bug this command triggers")
            return real(command, now, envelope)

        monkeypatch.setattr(rig.actuator.journal, "accept", broken)
        bad = codec.encode(signer.seal(target))
    rig.transport.publish(COMMANDS, "gpu-node-001", bad)
    rig.transport.publish(COMMANDS, "gpu-node-005", codec.encode(signer.seal(_command(rig, "gpu-node-005"))))
    rig.actuator.step()
    assert rig.transport.pending(COMMANDS) == 0
    assert rig.scheduler.drain_reason("gpu-node-005") is not None  # the good command was carried out
    assert rig.scheduler.drain_reason("gpu-node-001") is None
    letters = _letters(rig.transport, "d")
    assert len(letters) == 1 and letters[0].payload == bad[:MAX_PAYLOAD_BYTES] and letters[0].reason
    if kind == "raises":
        assert "handling failed: ValueError" in letters[0].reason
