"""Kafka transport (kafka-python): the distributed engine behind the same Transport protocol.

Producer: ``acks=all``, one request in flight per connection (so a retry cannot reorder a node's messages),
compression from config, key = node name (so one node's messages stay in one partition, in order).
Consumer: a consumer group with auto-commit off; ``commit()`` is called after a batch's effects are stored.
TLS/SASL settings in ``transport.kafka.client`` are passed through to kafka-python unchanged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError

from sentinel.errors import TransportError
from sentinel.transport import Message

log = logging.getLogger(__name__)


class KafkaTransport:
    def __init__(self, bootstrap: str, client: dict[str, Any] | None = None, compression: str | None = "zstd",
                 send_timeout_s: float = 10.0, session_timeout_ms: int = 10_000,
                 heartbeat_interval_ms: int = 3_000, api_version: tuple[int, ...] | None = (2, 8, 0)) -> None:
        self.bootstrap = bootstrap
        # A fixed protocol version keeps the producer from blocking in its constructor to probe the broker, so an
        # absent broker shows up as a bounded send timeout (send_timeout_s) instead of a long bootstrap wait.
        self.api_version = api_version
        self.client = dict(client or {})
        self.compression = compression
        self.send_timeout_s = send_timeout_s
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._producer: KafkaProducer | None = None

    def _get_producer(self) -> KafkaProducer:
        if self._producer is None:
            try:
                self._producer = KafkaProducer(
                    bootstrap_servers=self.bootstrap, acks="all", compression_type=self.compression,
                    linger_ms=5, retries=3, max_in_flight_requests_per_connection=1,
                    max_block_ms=int(self.send_timeout_s * 1000), request_timeout_ms=int(self.send_timeout_s * 1000),
                    reconnect_backoff_max_ms=2000, api_version=self.api_version, **self.client)
            except KafkaError as exc:
                raise TransportError(f"Kafka at {self.bootstrap} unreachable: {exc}") from None
        return self._producer

    def publish(self, topic: str, key: str | None, value: bytes) -> None:
        self.publish_batch([(topic, key, value)])

    def publish_batch(self, messages: Iterable[tuple[str, str | None, bytes]]) -> None:
        """Send all messages and wait until every one is acknowledged; raise TransportError if any was not.

        On error some of the batch may have been written: the caller resends the whole batch, so consumers
        see at-least-once delivery (they are idempotent).
        """
        producer = self._get_producer()
        try:
            futures = [producer.send(topic, key=key.encode() if key else None, value=value)
                       for topic, key, value in messages]
            producer.flush(timeout=self.send_timeout_s)
            for future in futures:
                future.get(timeout=self.send_timeout_s)
        except KafkaError as exc:
            # Drop the producer: records of a failed batch would otherwise stay in its buffer and be sent (or
            # expire) long after the caller resent them, filling the buffer during a long outage.
            self._discard_producer()
            raise TransportError(f"Kafka at {self.bootstrap} did not take the batch: {exc}") from None

    def _discard_producer(self) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=0)
            except KafkaError as exc:
                log.debug("discarding the Kafka producer: %s", exc)
            self._producer = None

    def consumer(self, group: str, topics: list[str], replay_messages: int = 0) -> KafkaTopicConsumer:
        return KafkaTopicConsumer(self, group, topics, replay_messages)

    def ensure_topics(self, partitions: dict[str, int]) -> list[str]:
        """Create missing topics with the given partition counts; return the ones created."""
        from kafka.admin import KafkaAdminClient, NewTopic
        from kafka.errors import TopicAlreadyExistsError

        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, **self.client)
        except KafkaError as exc:
            raise TransportError(f"Kafka at {self.bootstrap} unreachable: {exc}") from None
        try:
            existing = set(admin.list_topics())
            wanted = [NewTopic(name, n, 1) for name, n in partitions.items() if name not in existing]
            if wanted:
                with contextlib.suppress(TopicAlreadyExistsError):  # another service created it first
                    admin.create_topics(wanted)
            return [t.name for t in wanted]
        except KafkaError as exc:
            raise TransportError(f"creating topics on {self.bootstrap}: {exc}") from None
        finally:
            admin.close()

    def close(self) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=self.send_timeout_s)
            except KafkaError as exc:
                log.warning("closing the Kafka producer: %s", exc)
            self._producer = None


class _Assignments(ConsumerRebalanceListener):
    """Notes partitions handed to this member; the consumer seeks them back in its own thread (kafka-python's
    listener runs on the network thread, where blocking calls such as ``committed()`` are not allowed)."""

    def __init__(self) -> None:
        self.new: set[Any] = set()
        self.revoked: set[Any] = set()

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.revoked.update(revoked)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.new.update(assigned)


# Fetch larger responses: the NVML agent's sample is ~1 KB compressed and travels as its own record batch, and
# with kafka-python's 1 MiB per partition a detector member spent about a third of its time waiting on the
# broker's fetch responses. A member catching up holds up to 8 MiB per assigned partition in a response. Asking
# the broker to wait for a minimum size (fetch_min_bytes) was as fast on tansu's memory storage but tansu on S3
# then answered nothing at all (tests/test_agent_outage.py), so it is left at kafka-python's default.
# docs/benchmarks.md (Pipeline) has the measurements.
FETCH = {"max_partition_fetch_bytes": 8 << 20}


class KafkaTopicConsumer:
    def __init__(self, transport: KafkaTransport, group: str, topics: list[str], replay_messages: int = 0) -> None:
        self.live_from: dict[Any, int] = {}
        self.replay = replay_messages
        self._assignments = _Assignments()
        try:
            self.consumer = KafkaConsumer(
                bootstrap_servers=transport.bootstrap, group_id=group, enable_auto_commit=False,
                auto_offset_reset="earliest", session_timeout_ms=transport.session_timeout_ms,
                heartbeat_interval_ms=transport.heartbeat_interval_ms, api_version=transport.api_version,
                **{**FETCH, **transport.client})
            self.consumer.subscribe(topics, listener=self._assignments)
        except KafkaError as exc:
            raise TransportError(f"Kafka at {transport.bootstrap} unreachable: {exc}") from None

    def poll(self, max_messages: int = 500, timeout_s: float = 0.0) -> list[Message]:
        try:
            batches = self.consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_messages)
        except KafkaError as exc:
            raise TransportError(f"Kafka poll failed: {exc}") from None
        rewound = self._rebuild_new_partitions()
        out: list[Message] = []
        for tp, records in batches.items():
            if tp in rewound:
                continue  # fetched from the committed offset before the rewind: will come again, in order
            live_from = self.live_from.get(tp, -1)
            out.extend(Message(r.topic, r.partition, r.offset, r.key.decode(errors="replace") if r.key else None,
                               r.value, replay=r.offset < live_from) for r in records)
        return out

    def _rebuild_new_partitions(self) -> set[Any]:
        """For partitions assigned since the last poll: remember where live messages start (the committed
        offset) and seek back up to ``replay`` messages so the owner can rebuild its state first."""
        for tp in self._assignments.revoked:
            self.live_from.pop(tp, None)
        self._assignments.revoked.clear()
        rewound: set[Any] = set()
        for tp in list(self._assignments.new):
            self._assignments.new.discard(tp)
            committed = self.consumer.committed(tp)
            if committed is None:
                continue  # the group never consumed it: start at the beginning, nothing to rebuild
            self.live_from[tp] = committed
            if self.replay > 0 and committed > 0:
                self.consumer.seek(tp, max(0, committed - self.replay))
                rewound.add(tp)
        return rewound

    def lag(self) -> dict[str, int]:
        """Messages per topic between this member's position and the high watermark of its partitions. Uses
        ``highwater`` (from fetch responses), not ``end_offsets()``, which tansu answers wrongly; a partition
        not fetched yet has no watermark and counts 0 until the first fetch."""
        out: dict[str, int] = {}
        for tp in self.consumer.assignment():
            high = self.consumer.highwater(tp)
            behind = max(high - self.consumer.position(tp), 0) if high is not None else 0
            out[tp.topic] = out.get(tp.topic, 0) + behind
        return out

    def commit(self) -> None:
        try:
            self.consumer.commit()
        except KafkaError as exc:
            raise TransportError(f"Kafka commit failed: {exc}") from None

    def close(self) -> None:
        self.consumer.close()
