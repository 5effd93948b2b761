"""The Kafka transport against the real tansu broker: ordered per key, groups, commits, and clear failures."""

from __future__ import annotations

import time
import uuid

import pytest

from sentinel.errors import TransportError
from sentinel.transport.kafka import KafkaTransport


def _drain(consumer, want: int, timeout_s: float = 30.0) -> list:  # type: ignore[no-untyped-def]
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(1000, timeout_s=0.5))
    return got


def test_a_batch_is_acknowledged_and_consumed_in_order(kafka_bootstrap: str) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    transport = KafkaTransport(kafka_bootstrap, session_timeout_ms=6000, heartbeat_interval_ms=1000)
    transport.publish_batch([(topic, "gpu-node-001", f"m{i}".encode()) for i in range(200)])
    consumer = transport.consumer(f"g-{uuid.uuid4().hex[:8]}", [topic])
    messages = _drain(consumer, 200)
    assert [m.value for m in messages] == [f"m{i}".encode() for i in range(200)]
    assert {m.key for m in messages} == {"gpu-node-001"}
    consumer.commit()
    consumer.close()
    transport.close()


def test_committed_messages_are_not_delivered_again_to_the_group(kafka_bootstrap: str) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    transport = KafkaTransport(kafka_bootstrap, session_timeout_ms=6000, heartbeat_interval_ms=1000)
    transport.publish_batch([(topic, "n", b"first")])
    consumer = transport.consumer(group, [topic])
    assert [m.value for m in _drain(consumer, 1)] == [b"first"]
    consumer.commit()
    consumer.close()
    transport.publish_batch([(topic, "n", b"second")])
    again = transport.consumer(group, [topic])
    assert [m.value for m in _drain(again, 1)] == [b"second"]
    again.close()
    transport.close()


def test_an_unreachable_broker_is_a_transport_error_not_a_hang() -> None:
    from sentinel_bench.brokers import free_port

    transport = KafkaTransport(f"127.0.0.1:{free_port()}", send_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(TransportError, match="unreachable|did not take"):
        transport.publish_batch([("t", "n", b"x")])
    assert time.monotonic() - started < 15


def test_consumers_fetch_large_responses_and_a_lone_message_on_a_quiet_topic_arrives(kafka_bootstrap: str) -> None:
    """The consumers fetch up to 8 MiB per partition (FETCH); a single small message on a quiet topic still
    arrives (the broker is not asked to wait for a minimum size)."""
    from sentinel.transport.kafka import FETCH

    topic = f"t-{uuid.uuid4().hex[:8]}"
    transport = KafkaTransport(kafka_bootstrap, session_timeout_ms=6000, heartbeat_interval_ms=1000)
    transport.ensure_topics({topic: 1})
    consumer = transport.consumer(f"g-{uuid.uuid4().hex[:8]}", [topic])
    assert all(consumer.consumer.config[k] == v for k, v in FETCH.items())  # type: ignore[attr-defined]
    assert _drain(consumer, 1, timeout_s=3.0) == []  # joined the group, nothing there yet
    transport.publish_batch([(topic, "n", b"alone")])
    assert [m.value for m in _drain(consumer, 1, timeout_s=10.0)] == [b"alone"]
    consumer.close()
    transport.close()
