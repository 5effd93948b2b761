"""The embedded transport: ordered topics, independent consumer groups, at-least-once delivery, bounded size."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel.errors import TransportError
from sentinel.transport import Message
from sentinel.transport.memory import MemoryTransport

TOPIC = "sentinel.telemetry"


def publish_all(transport: MemoryTransport, values: list[bytes], topic: str = TOPIC) -> None:
    for value in values:
        transport.publish(topic, "gpu-01", value)


def values_of(messages: list[Message]) -> list[bytes]:
    return [m.value for m in messages]


def payloads(n: int, start: int = 0) -> list[bytes]:
    return [f"m{i}".encode() for i in range(start, start + n)]


def test_poll_returns_published_messages_in_order_with_consecutive_offsets() -> None:
    transport = MemoryTransport()
    consumer = transport.consumer("detector", [TOPIC])
    publish_all(transport, payloads(5))
    messages = consumer.poll()
    assert values_of(messages) == payloads(5)
    assert [m.offset for m in messages] == [0, 1, 2, 3, 4]
    assert all(m.topic == TOPIC and m.key == "gpu-01" and m.partition == 0 for m in messages)


def test_a_poll_after_everything_was_read_returns_nothing() -> None:
    transport = MemoryTransport()
    consumer = transport.consumer("detector", [TOPIC])
    publish_all(transport, payloads(2))
    consumer.poll()
    assert consumer.poll() == []


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=8), max_size=40), st.integers(min_value=1, max_value=7))
def test_polling_in_batches_yields_every_message_once_in_order(values: list[bytes], batch: int) -> None:
    transport = MemoryTransport()
    consumer = transport.consumer("detector", [TOPIC])
    publish_all(transport, values)
    seen: list[Message] = []
    while chunk := consumer.poll(max_messages=batch):
        assert len(chunk) <= batch
        seen.extend(chunk)
        consumer.commit()
    assert values_of(seen) == values
    assert [m.offset for m in seen] == list(range(len(values)))


def test_poll_with_max_messages_bounds_the_batch() -> None:
    transport = MemoryTransport()
    consumer = transport.consumer("detector", [TOPIC])
    publish_all(transport, payloads(10))
    assert values_of(consumer.poll(max_messages=3)) == payloads(3)
    assert values_of(consumer.poll(max_messages=3)) == payloads(3, start=3)
    assert values_of(consumer.poll(max_messages=100)) == payloads(4, start=6)


def test_max_messages_bounds_the_batch_across_several_topics() -> None:
    transport = MemoryTransport()
    consumer = transport.consumer("detector", ["a", "b"])
    publish_all(transport, payloads(3), topic="a")
    publish_all(transport, payloads(3, start=10), topic="b")
    first = consumer.poll(max_messages=4)
    rest = consumer.poll(max_messages=4)
    assert len(first) == 4 and len(rest) == 2
    assert sorted(values_of(first + rest)) == sorted(payloads(3) + payloads(3, start=10))


def test_a_consumer_in_another_group_sees_everything_independently() -> None:
    transport = MemoryTransport()
    detector = transport.consumer("detector", [TOPIC])
    archiver = transport.consumer("archiver", [TOPIC])
    publish_all(transport, payloads(4))
    assert values_of(detector.poll()) == payloads(4)
    detector.commit()
    assert values_of(archiver.poll(max_messages=2)) == payloads(2)
    publish_all(transport, payloads(1, start=4))
    assert values_of(detector.poll()) == payloads(1, start=4)
    assert values_of(archiver.poll()) == payloads(3, start=2)


def test_uncommitted_messages_are_redelivered_to_the_next_consumer_of_the_group() -> None:
    transport = MemoryTransport()
    first = transport.consumer("detector", [TOPIC])
    publish_all(transport, payloads(5))
    assert values_of(first.poll(max_messages=2)) == payloads(2)
    first.commit()
    assert values_of(first.poll()) == payloads(3, start=2)
    first.close()  # crashed before committing the last three
    second = transport.consumer("detector", [TOPIC])
    assert values_of(second.poll()) == payloads(3, start=2)


def test_committed_messages_are_not_redelivered() -> None:
    transport = MemoryTransport()
    first = transport.consumer("detector", [TOPIC])
    publish_all(transport, payloads(3))
    first.poll()
    first.commit()
    first.close()
    second = transport.consumer("detector", [TOPIC])
    assert second.poll() == []
    publish_all(transport, payloads(1, start=3))
    assert values_of(second.poll()) == payloads(1, start=3)


def test_publishing_is_refused_when_capacity_uncommitted_messages_are_held() -> None:
    transport = MemoryTransport(capacity=3)
    consumer = transport.consumer("detector", [TOPIC])
    publish_all(transport, payloads(3))
    with pytest.raises(TransportError, match="full"):
        transport.publish(TOPIC, "gpu-01", b"one too many")
    consumer.poll(max_messages=1)
    with pytest.raises(TransportError):  # read but not committed: still held
        transport.publish(TOPIC, "gpu-01", b"one too many")
    consumer.commit()
    transport.publish(TOPIC, "gpu-01", b"m3")
    assert values_of(consumer.poll()) == [b"m1", b"m2", b"m3"]


def test_the_slowest_group_holds_the_capacity() -> None:
    transport = MemoryTransport(capacity=2)
    fast = transport.consumer("fast", [TOPIC])
    slow = transport.consumer("slow", [TOPIC])
    publish_all(transport, payloads(2))
    fast.poll()
    fast.commit()
    with pytest.raises(TransportError):
        transport.publish(TOPIC, None, b"x")
    slow.poll()
    slow.commit()
    transport.publish(TOPIC, None, b"x")
    assert values_of(fast.poll()) == [b"x"] and values_of(slow.poll()) == [b"x"]


def test_a_refused_message_is_not_stored() -> None:
    transport = MemoryTransport(capacity=1)
    consumer = transport.consumer("detector", [TOPIC])
    transport.publish(TOPIC, None, b"kept")
    with pytest.raises(TransportError):
        transport.publish(TOPIC, None, b"refused")
    assert values_of(consumer.poll()) == [b"kept"]
    assert transport.pending(TOPIC) == 1


def test_pending_reports_the_lag_of_the_slowest_group() -> None:
    transport = MemoryTransport()
    fast = transport.consumer("fast", [TOPIC])
    slow = transport.consumer("slow", [TOPIC])
    assert transport.pending(TOPIC) == 0
    publish_all(transport, payloads(5))
    assert transport.pending(TOPIC) == 5
    fast.poll()
    assert transport.pending(TOPIC) == 5  # polled is not done
    fast.commit()
    slow.poll(max_messages=2)
    slow.commit()
    assert transport.pending(TOPIC) == 3
    slow.poll()
    slow.commit()
    assert transport.pending(TOPIC) == 0


def test_pending_without_any_group_counts_every_held_message() -> None:
    transport = MemoryTransport()
    publish_all(transport, payloads(4))
    assert transport.pending(TOPIC) == 4


def test_a_closed_transport_refuses_to_publish() -> None:
    transport = MemoryTransport()
    transport.close()
    with pytest.raises(TransportError, match="closed"):
        transport.publish(TOPIC, "gpu-01", b"late")


def test_a_poll_on_a_closed_transport_returns_at_once_instead_of_waiting() -> None:
    transport = MemoryTransport()
    consumer = transport.consumer("detector", [TOPIC])
    transport.close()
    started = time.monotonic()
    assert consumer.poll(timeout_s=5.0) == []
    assert time.monotonic() - started < 1.0


def test_a_poll_that_waits_returns_at_once_when_messages_are_already_there() -> None:
    transport = MemoryTransport()
    consumer = transport.consumer("detector", [TOPIC])
    publish_all(transport, payloads(1))
    started = time.monotonic()
    assert values_of(consumer.poll(timeout_s=5.0)) == payloads(1)
    assert time.monotonic() - started < 1.0


def test_published_bytes_are_copied_so_later_mutation_does_not_change_the_message() -> None:
    transport = MemoryTransport()
    consumer = transport.consumer("detector", [TOPIC])
    buffer = bytearray(b"abc")
    transport.publish(TOPIC, None, buffer)
    buffer[0] = ord("z")
    assert values_of(consumer.poll()) == [b"abc"]
