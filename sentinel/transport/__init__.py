"""The Transport seam: topics of encoded records between services.

``memory`` is the embedded default for one process; ``kafka`` (kafka-python) is the distributed engine.
Both give the same semantics: per-key order, consumer groups, offsets committed only after the effects of a
message are stored (at-least-once), so every consumer's effects must be idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from sentinel.topics import ALL_TOPICS, COMMANDS, DEAD_LETTERS, FINDINGS, LOGS, RESULTS, TELEMETRY

__all__ = ["ALL_TOPICS", "COMMANDS", "DEAD_LETTERS", "FINDINGS", "LOGS", "RESULTS", "TELEMETRY", "Consumer",
           "Message", "Transport"]


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes
    replay: bool = False  # re-read after a partition was assigned, only to rebuild state: produce no effects


class Consumer(Protocol):
    def poll(self, max_messages: int = 500, timeout_s: float = 0.0) -> list[Message]:
        """Return up to ``max_messages`` after the last one returned; wait up to ``timeout_s`` when none."""
        ...

    def commit(self) -> None:
        """Mark everything returned by ``poll`` so far as done (call after its effects are stored)."""
        ...

    def lag(self) -> dict[str, int]:
        """Messages per topic between this consumer's position and the high watermark (what is still to read)."""
        ...

    def close(self) -> None: ...


class Transport(Protocol):
    def publish(self, topic: str, key: str | None, value: bytes) -> None:
        """Append one message; raise ``TransportError`` when it cannot be accepted."""
        ...

    def publish_batch(self, messages: Iterable[tuple[str, str | None, bytes]]) -> None:
        """Append messages in order; return once all are accepted, else raise ``TransportError``."""
        ...

    def consumer(self, group: str, topics: list[str], replay_messages: int = 0) -> Consumer:
        """Join ``group`` on ``topics``. With ``replay_messages``, each newly assigned partition is first re-read
        from up to that many messages before its committed offset, marked ``replay`` (state rebuild)."""
        ...

    def close(self) -> None: ...
