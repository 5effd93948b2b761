"""Issue 38 item 1 of its "why": a forged finding on the broker drained a healthy node with a command the
controller itself signed. Findings and results are now sealed by the service that produced them; the controller
acts only on records sealed with a key it trusts (sentinel.actuator.sealed)."""

from __future__ import annotations

import secrets

import pytest

from sentinel import codec
from sentinel.actuator.sealed import Opener, RecordRefused, Sealer
from sentinel.actuator.signing import SigningKey, process_key
from sentinel.config import from_mapping
from sentinel.daemon import run_detector
from sentinel.detector.findings import make_finding
from sentinel.errors import ConfigError
from sentinel.events import (
    ActionResult,
    DeadLetter,
    Finding,
    FindingClass,
    Recommendation,
    SealedRecord,
    Severity,
    Step,
    StepStatus,
)
from sentinel.store.repository import Repository
from sentinel.transport import DEAD_LETTERS, FINDINGS, RESULTS
from tests.test_pipeline import make_rig


def _critical(node: str, ts: float) -> Finding:
    return make_finding("xid-fatal", FindingClass.GPU_XID, node, ts, ts, Severity.FATAL,
                        Recommendation.CHECKPOINT_DRAIN, 1.0, "GPU 0: Xid 79 (fallen off the bus)", 0, {})


def _letters(rig) -> list[DeadLetter]:  # type: ignore[no-untyped-def]
    return [codec.decode(m.value) for m in rig.pipeline.transport.consumer("dlq", [DEAD_LETTERS]).poll(100)]


def _other_key() -> SigningKey:
    return SigningKey(secrets.token_bytes(32), "attacker")


@pytest.mark.parametrize("how", ["bare", "other_key", "tampered", "a_result_seal"])
def test_a_forged_finding_drains_nothing_and_the_next_real_fault_is_acted_on(repo: Repository, how: str) -> None:
    rig = make_rig(repo)
    forged = _critical("gpu-node-006", rig.clock.now())
    if how == "bare":  # what drained a healthy node on e5bcaaa
        data = codec.encode(forged)
    elif how == "other_key":
        data = Sealer(_other_key(), Finding).seal(forged)
    elif how == "tampered":  # a genuine seal of a harmless record, its payload swapped
        envelope = codec.decode(Sealer(process_key(), Finding).seal(forged))
        assert isinstance(envelope, SealedRecord)
        other = codec.encode(_critical("gpu-node-005", rig.clock.now()))
        data = codec.encode(SealedRecord(key_id=envelope.key_id, payload=other, signature=envelope.signature))
    else:  # the trusted key, but sealed as a result: kinds have keys of their own
        envelope = codec.decode(Sealer(process_key(), ActionResult).seal(
            ActionResult(id="r1", command_id="c1", incident_id="i1", node="gpu-node-006", ts=1.0, step=Step.VERIFY,
                         status=StepStatus.OK)))
        assert isinstance(envelope, SealedRecord)
        data = codec.encode(SealedRecord(key_id=envelope.key_id, payload=codec.encode(forged),
                                         signature=envelope.signature))
    rig.pipeline.transport.publish(FINDINGS, forged.node, data)
    rig.tick()
    assert rig.scheduler.drain_reason("gpu-node-006") is None and rig.scheduler.drain_reason("gpu-node-005") is None
    assert repo.table("findings") == [] and repo.table("commands") == []
    [letter] = _letters(rig)
    reason = {"bare": "unsealed", "other_key": "unknown_key", "tampered": "bad_signature",
              "a_result_seal": "bad_signature"}[how]
    assert letter.source_topic == FINDINGS and letter.reason.startswith(reason) and letter.payload == data
    assert rig.metrics.records_refused.labels(FINDINGS, reason)._value.get() == 1
    rig.xid("gpu-node-002", 79)  # the detector's own finding still acts
    rig.tick()
    assert (rig.scheduler.drain_reason("gpu-node-002") or "").startswith("sentinel: ")


def test_a_bare_result_is_refused_and_the_actuators_own_results_are_sealed(repo: Repository) -> None:
    rig = make_rig(repo)
    probe = rig.pipeline.transport.consumer("results-probe", [RESULTS])
    bare = ActionResult(id="r-bare", command_id="c", incident_id="i", node="gpu-node-003", ts=1.0, step=Step.VERIFY,
                        status=StepStatus.OK)
    rig.pipeline.transport.publish(RESULTS, "gpu-node-003", codec.encode(bare))
    rig.xid("gpu-node-002", 79)
    rig.tick()
    assert [x.reason.split(":")[0] for x in _letters(rig)] == ["unsealed"]
    opener = Opener([process_key()], ActionResult)
    own = [m for m in probe.poll(100) if m.value != codec.encode(bare)]
    assert own and all(isinstance(codec.decode(m.value), SealedRecord) for m in own)
    assert {opener.open(m.value).node for m in own} == {"gpu-node-002"}
    assert [c["status"] for c in repo.table("commands")] == ["done"]  # the sealed results were applied


def test_an_opener_holds_previous_keys_during_a_rotation() -> None:
    old, new = _other_key(), process_key()
    finding = _critical("gpu-node-001", 5.0)
    assert Opener([new, old], Finding).open(Sealer(old, Finding).seal(finding)) == finding
    with pytest.raises(RecordRefused, match="unknown_key"):
        Opener([new], Finding).open(Sealer(old, Finding).seal(finding))


def test_the_detector_service_refuses_to_start_without_the_key_it_seals_with() -> None:
    import threading

    config = from_mapping({"transport": {"kind": "kafka"}})
    with pytest.raises(ConfigError, match="security.key_file"):
        run_detector(config, threading.Event())


def test_the_controllers_node_gate_is_closed_while_the_schedulers_list_is_empty(repo: Repository) -> None:
    """Issue 38 item 2: the node gate lived in the detector only and let every name through while the list was
    empty; a controller that drives a scheduler now acts only on nodes the scheduler listed."""
    rig = make_rig(repo)
    rig.pipeline.controller.gate_nodes = True  # what daemon.start_background sets after the drain watch's pass
    rig.xid("gpu-node-002", 79)
    rig.tick()
    assert rig.scheduler.drain_reason("gpu-node-002") is None and repo.table("commands") == []
    [drain] = [d for d in repo.table("decisions") if d["action"] == "drain_requeue"]
    assert drain["mode"] == "observe" and "not in the scheduler's node list" in drain["reason"]
    repo.set_scheduler_nodes(["gpu-node-003"], rig.clock.now())
    rig.xid("gpu-node-003", 79)
    rig.tick()
    assert (rig.scheduler.drain_reason("gpu-node-003") or "").startswith("sentinel: ")
