"""Dead letters: a message no service can use is kept whole, with the reason and its origin, and counted."""

from __future__ import annotations

import logging

from sentinel import codec
from sentinel.errors import TransportError
from sentinel.events import DeadLetter
from sentinel.metrics import Metrics
from sentinel.transport import DEAD_LETTERS, Message, Transport

log = logging.getLogger(__name__)


def send_dead_letter(transport: Transport, message: Message, reason: str, metrics: Metrics, now: float) -> None:
    """Publish ``message`` to the dead-letter topic; if even that fails, log it whole so nothing is lost."""
    letter = DeadLetter(
        ts=now,
        reason=reason[:4096],
        source_topic=message.topic,
        source_partition=message.partition,
        source_offset=message.offset,
        key=message.key[:256] if message.key else None,
        payload=message.value,
    )
    metrics.dead_letters.labels(message.topic).inc()
    log.warning("dead letter from %s[%d]@%d: %s", message.topic, message.partition, message.offset, reason)
    try:
        transport.publish(DEAD_LETTERS, message.key, codec.encode(letter))
    except TransportError as exc:
        log.error("dead-letter topic refused the message (%s); payload=%r", exc, message.value[:4096])
