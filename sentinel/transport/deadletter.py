"""Dead letters: a message no service can use is kept whole, with the reason and its origin, and counted.

A service that meets many bad messages in one poll (a misconfigured agent, a flood) sends their dead letters in
one batch (``DeadLetterBatch``): one acknowledged produce per poll, not one round trip per message, so a flood of
garbage cannot slow the handling of the good messages beside it to the broker's round-trip rate.
"""

from __future__ import annotations

import logging

from sentinel import codec
from sentinel.errors import TransportError
from sentinel.events import DeadLetter
from sentinel.obs.metrics import ServiceMetrics
from sentinel.transport import DEAD_LETTERS, Message, Transport

log = logging.getLogger(__name__)

MAX_PAYLOAD_BYTES = 1 << 20  # of a message kept in its dead letter (base64 in JSON: well inside the 4 MiB limit)


class DeadLetterBatch:
    """Dead letters gathered while a poll's messages are handled; ``send`` publishes them in one batch."""

    def __init__(self, transport: Transport, metrics: ServiceMetrics) -> None:
        self.transport = transport
        self.metrics = metrics
        self.pending: list[tuple[Message, DeadLetter]] = []

    def add(self, message: Message, reason: str, now: float) -> None:
        payload = message.value
        if len(payload) > MAX_PAYLOAD_BYTES:  # an oversized message's letter must still fit on the topic
            reason = f"{reason[:3900]} (payload cut to its first {MAX_PAYLOAD_BYTES} of {len(payload)} bytes)"
            payload = payload[:MAX_PAYLOAD_BYTES]
        letter = DeadLetter(ts=now, reason=reason[:4096], source_topic=message.topic,
                            source_partition=message.partition, source_offset=message.offset,
                            key=message.key[:256] if message.key else None, payload=payload)
        self.metrics.dead_letters.labels(message.topic).inc()
        log.debug("dead letter from %s[%d]@%d: %s", message.topic, message.partition, message.offset, reason)
        self.pending.append((message, letter))

    def send(self) -> None:
        """Publish what was gathered; if even that fails, log each message whole so nothing is lost."""
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        first, letter = pending[0]
        log.warning("%d dead letter(s); the first from %s[%d]@%d: %s", len(pending), first.topic, first.partition,
                    first.offset, letter.reason)
        try:
            self.transport.publish_batch([(DEAD_LETTERS, m.key, codec.encode(d)) for m, d in pending])
        except TransportError as exc:
            for message, dead in pending:
                log.error("dead-letter topic refused the message (%s); reason=%s payload=%r", exc, dead.reason,
                          message.value[:4096])


def send_dead_letter(transport: Transport, message: Message, reason: str, metrics: ServiceMetrics, now: float) -> None:
    """Publish one dead letter at once (services that meet bad messages one at a time)."""
    batch = DeadLetterBatch(transport, metrics)
    batch.add(message, reason, now)
    batch.send()
