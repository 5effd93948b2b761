"""Delivery on the in-process path: at-least-once messages count once, bad messages become dead letters without
holding the good ones back, and an effect whose publish failed goes out later before its batch is committed."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import codec
from sentinel.actuator.sealed import Sealer
from sentinel.actuator.signing import process_key
from sentinel.detector.findings import make_finding
from sentinel.errors import TransportError
from sentinel.events import DeadLetter, Finding, FindingClass, Recommendation, Severity
from sentinel.store.repository import Repository
from sentinel.transport import COMMANDS, DEAD_LETTERS, FINDINGS, LOGS, TELEMETRY
from tests.test_pipeline import NODES, make_rig


def test_a_redelivered_finding_produces_no_second_decision_or_command(repo: Repository) -> None:
    rig = make_rig(repo)
    rig.xid("gpu-node-007", 79)
    rig.tick()
    finding = repo.table("findings")[0]
    # Replay every finding message the controller already handled, as a crashed consumer group would.
    consumer = rig.pipeline.transport.consumer("replay-probe", ["sentinel.findings"])
    for message in consumer.poll(100):
        rig.pipeline.transport.publish("sentinel.findings", message.key, message.value)
    rig.pipeline.pump()
    assert sorted(d["action"] for d in repo.table("decisions")) == ["drain_requeue", "request_reboot"]
    assert len(repo.table("commands")) == 1
    assert [f["id"] for f in repo.table("findings")] == [finding["id"]]


def test_malformed_telemetry_goes_to_dead_letters_with_reason_and_the_rest_flows(repo: Repository) -> None:
    rig = make_rig(repo)
    rig.pipeline.transport.publish(TELEMETRY, "gpu-node-001", b'{"type":"telemetry","node":"bad node;rm -rf","ts":1}')
    rig.pipeline.transport.publish(TELEMETRY, "gpu-node-001", b"\xff\xfe not json")
    rig.xid("gpu-node-002", 79)
    rig.tick()
    letters = [codec.decode(m.value) for m in rig.pipeline.transport.consumer("dlq", [DEAD_LETTERS]).poll(10)]
    assert len(letters) == 2 and all(isinstance(x, DeadLetter) for x in letters)
    assert "node" in letters[0].reason and letters[0].source_topic == TELEMETRY
    assert letters[1].payload == b"\xff\xfe not json"
    assert rig.metrics.dead_letters.labels(TELEMETRY)._value.get() == 2
    assert rig.scheduler.drain_reason("gpu-node-002") is not None


def test_a_flood_of_malformed_messages_costs_one_acknowledged_produce_per_poll(repo: Repository) -> None:
    """Each acknowledged produce is a broker round trip: one per dead letter let 10,000 bad messages hold the
    good ones behind them for minutes (the CI run of the Kafka must-show test timed out so)."""
    rig = make_rig(repo)
    transport = rig.pipeline.transport
    for i in range(500):
        transport.publish(TELEMETRY, "gpu-node-001", b"\xff\xfe garbage %d" % i)
    rig.xid("gpu-node-002", 79)
    batches: list[list[str]] = []
    real = transport.publish_batch

    def counting(messages: Any) -> None:
        messages = list(messages)
        batches.append([topic for topic, _, _ in messages])
        real(messages)

    transport.publish_batch = counting  # type: ignore[method-assign]
    rig.pipeline.detector.step()
    assert [b for b in batches if DEAD_LETTERS in b] == [[DEAD_LETTERS] * 500]
    assert [b for b in batches if FINDINGS in b] == [[FINDINGS]]
    assert rig.metrics.dead_letters.labels(TELEMETRY)._value.get() == 500
    assert len(transport.consumer("dlq", [DEAD_LETTERS]).poll(1000)) == 500


def test_a_sample_delivered_twice_enters_the_window_once(repo: Repository) -> None:
    rig = make_rig(repo)
    seen = rig.pipeline.detector.samples_seen
    rig.clock.advance(10.0)
    rig.sample(NODES[0])
    rig.sample(NODES[0])  # at-least-once delivery: the same reading again
    rig.pipeline.pump()
    assert rig.pipeline.detector.samples_seen == seen + 1
    assert rig.pipeline.detector.windows[NODES[0]].count == 2


def _fail_first_publish(transport: Any, failing_topic: str) -> None:
    """The next publish to ``failing_topic`` fails as a broker outage would; every other one goes through."""
    real_publish = transport.publish
    failures = [1]

    def publish(topic: str, key: str | None, value: bytes) -> None:
        if topic == failing_topic and failures[0]:
            failures[0] -= 1
            raise TransportError("broker unreachable (injected)")
        real_publish(topic, key, value)

    transport.publish = publish


def test_a_finding_whose_publish_failed_is_published_later_and_its_batch_is_not_committed_before(
        repo: Repository) -> None:
    rig = make_rig(repo)
    transport = rig.pipeline.transport
    _fail_first_publish(transport, FINDINGS)
    rig.xid("gpu-node-003", 79)
    rig.clock.advance(10.0)
    with pytest.raises(TransportError):
        rig.pipeline.detector.step()
    assert transport.pending(LOGS) == 1  # the batch with the Xid is not committed while its finding is unsent
    rig.tick()
    rig.tick()
    assert (rig.scheduler.drain_reason("gpu-node-003") or "").startswith("sentinel: ")
    assert len(repo.table("findings")) == 1 and transport.pending(LOGS) == 0


def test_a_finding_delivered_twice_counts_once_toward_min_findings(repo: Repository) -> None:
    rig = make_rig(repo, policy={"hysteresis": {"min_findings": 2}})
    finding = make_finding("hazard-model", FindingClass.PREDICTED_FAILURE, "gpu-node-004", rig.clock.now(),
                           rig.clock.now(), Severity.CRITICAL, Recommendation.CHECKPOINT_DRAIN, 0.99,
                           "GPU 1: predicted failure", 1, {})
    for _ in range(2):
        rig.pipeline.transport.publish(FINDINGS, finding.node, Sealer(process_key(), Finding).seal(finding))
        rig.pipeline.pump()
    assert [d["action"] for d in repo.table("decisions")] == ["alert"]  # one finding so far: still waiting
    assert rig.scheduler.drain_reason("gpu-node-004") is None


def test_a_command_whose_publish_failed_is_sent_later_and_the_node_is_drained(repo: Repository) -> None:
    rig = make_rig(repo)
    _fail_first_publish(rig.pipeline.transport, COMMANDS)
    rig.xid("gpu-node-005", 79)
    rig.clock.advance(10.0)
    with pytest.raises(TransportError):
        rig.pipeline.pump()
    rig.tick()
    rig.tick()
    assert (rig.scheduler.drain_reason("gpu-node-005") or "").startswith("sentinel: ")
    assert [c["status"] for c in repo.table("commands")] == ["done"]


def test_a_forged_result_for_an_unknown_command_is_a_dead_letter_and_the_controller_goes_on(repo: Repository) -> None:
    """Issue 38 item 2: a result whose command id the store never issued crash-looped the controller (the
    store's foreign key refused it, nothing caught it, the message was never committed)."""
    from sentinel.events import ActionResult, Step, StepStatus
    from sentinel.transport import RESULTS

    rig = make_rig(repo)
    forged = ActionResult(id="r-forged", command_id="no-such-command", incident_id="inc-x", node="gpu-node-003",
                          ts=1.0, step=Step.VERIFY, status=StepStatus.OK)
    # sealed with the trusted key: schema-valid and authentic, but for a command the store never issued
    rig.pipeline.transport.publish(RESULTS, "gpu-node-003", Sealer(process_key(), ActionResult).seal(forged))
    rig.xid("gpu-node-002", 79)
    rig.tick()
    letters = [codec.decode(m.value) for m in rig.pipeline.transport.consumer("dlq", [DEAD_LETTERS]).poll(10)]
    assert [(x.source_topic, "unknown command" in x.reason) for x in letters] == [(RESULTS, True)]
    assert rig.scheduler.drain_reason("gpu-node-002") is not None
    assert rig.scheduler.drain_reason("gpu-node-003") is None
    assert not [r for r in repo.table("action_results") if r["command_id"] == "no-such-command"]
