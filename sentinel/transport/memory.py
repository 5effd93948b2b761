"""The embedded transport: bounded in-process topics with consumer groups and committed offsets.

One partition per topic (one process needs no more). A topic holds at most ``capacity`` messages that some
group has not committed yet; past that ``publish`` raises ``TransportError`` instead of growing without bound
or silently dropping, so the producer (the agent's spool) decides what to do. Committed prefixes are trimmed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

from sentinel.errors import TransportError
from sentinel.transport import Message


class _Topic:
    def __init__(self) -> None:
        self.base = 0  # offset of log[0]
        self.log: deque[Message] = deque()
        self.committed: dict[str, int] = {}  # group -> next offset to read after a restart


class MemoryTransport:
    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._topics: dict[str, _Topic] = {}
        self._cond = threading.Condition()
        self._closed = False

    def _topic(self, name: str) -> _Topic:
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = _Topic()
        return topic

    def publish(self, topic: str, key: str | None, value: bytes) -> None:
        with self._cond:
            if self._closed:
                raise TransportError("transport is closed")
            t = self._topic(topic)
            self._trim(t)
            if len(t.log) >= self.capacity:
                raise TransportError(f"topic {topic} is full ({self.capacity} uncommitted messages)")
            t.log.append(Message(topic, 0, t.base + len(t.log), key, bytes(value)))
            self._cond.notify_all()

    def publish_batch(self, messages: Iterable[tuple[str, str | None, bytes]]) -> None:
        for topic, key, value in messages:
            self.publish(topic, key, value)

    def consumer(self, group: str, topics: list[str], replay_messages: int = 0) -> MemoryConsumer:
        # One process, no rebalances: a partition is never handed over, so there is nothing to replay.
        with self._cond:
            for name in topics:
                t = self._topic(name)
                t.committed.setdefault(group, t.base)
        return MemoryConsumer(self, group, list(topics))

    def pending(self, topic: str) -> int:
        """Messages in ``topic`` not yet committed by its slowest group (the lag an operator sees)."""
        with self._cond:
            t = self._topic(topic)
            end = t.base + len(t.log)
            return max((end - c for c in t.committed.values()), default=len(t.log))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _trim(self, t: _Topic) -> None:
        # Keep what any group still needs; with no group yet, keep everything (up to capacity).
        if not t.committed:
            return
        low = min(t.committed.values())
        while t.log and t.base < low:
            t.log.popleft()
            t.base += 1

    # --- used by MemoryConsumer, under the condition lock ---
    def _read(self, name: str, position: int, limit: int) -> list[Message]:
        t = self._topic(name)
        start = max(position, t.base) - t.base
        return [t.log[i] for i in range(start, min(len(t.log), start + limit))]


class MemoryConsumer:
    def __init__(self, transport: MemoryTransport, group: str, topics: list[str]) -> None:
        self._t = transport
        self._group = group
        self._topics = topics
        with transport._cond:
            self._position = {name: transport._topic(name).committed[group] for name in topics}

    def poll(self, max_messages: int = 500, timeout_s: float = 0.0) -> list[Message]:
        with self._t._cond:
            out = self._take(max_messages)
            if not out and timeout_s > 0 and not self._t._closed:
                self._t._cond.wait(timeout_s)
                out = self._take(max_messages)
            return out

    def _take(self, limit: int) -> list[Message]:
        out: list[Message] = []
        for name in self._topics:
            if len(out) >= limit:
                break
            batch = self._t._read(name, self._position[name], limit - len(out))
            if batch:
                self._position[name] = batch[-1].offset + 1
                out.extend(batch)
        return out

    def commit(self) -> None:
        with self._t._cond:
            for name, position in self._position.items():
                t = self._t._topic(name)
                t.committed[self._group] = position
                self._t._trim(t)

    def lag(self) -> dict[str, int]:
        with self._t._cond:
            out: dict[str, int] = {}
            for name in self._topics:
                t = self._t._topic(name)
                out[name] = max(t.base + len(t.log) - self._position[name], 0)
            return out

    def close(self) -> None:
        """Uncommitted messages stay in the topic and are delivered again to the next consumer of the group."""
