"""A bounded on-disk FIFO between sampling and publishing, so a broker outage loses nothing and blocks nothing.

Every message is appended here first (SQLite in WAL mode: crash-safe, one file) and removed only after the
transport acknowledged it, so messages leave in the order they were sampled. When the spool holds
``max_messages``, the oldest are dropped to make room and counted: sampling never waits for the broker.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

Item = tuple[str, str | None, bytes]  # topic, key, value


class Spool:
    def __init__(self, path: str | Path, max_messages: int = 100_000) -> None:
        if max_messages < 1:
            raise ValueError("max_messages must be >= 1")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_messages = max_messages
        self.dropped = 0
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS spool (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL,"
                         " key TEXT, value BLOB NOT NULL)")
        self._depth = int(self._db.execute("SELECT COUNT(*) FROM spool").fetchone()[0])
        self.available = threading.Event()
        if self._depth:
            self.available.set()

    def append(self, items: list[Item]) -> int:
        """Add items at the tail; drop the oldest beyond the bound. Returns how many were dropped now.

        A full disk (SQLite's "database or disk is full") is one more bound: the oldest quarter of the spool (at
        least as many as arrive) is dropped to make room and the append is tried again; if even that fails, the
        new items are dropped. Either way they are counted and the agent keeps sampling."""
        with self._lock:
            try:
                return self._append(items)
            except sqlite3.OperationalError as exc:
                if "full" not in str(exc):
                    raise
                self._rollback()
            room = self._drop_oldest(max(len(items), self._depth // 4))
            try:
                return room + self._append(items)
            except sqlite3.OperationalError as exc:
                if "full" not in str(exc):
                    raise
                self._rollback()
                self.dropped += len(items)
                return room + len(items)

    def _append(self, items: list[Item]) -> int:
        self._db.execute("BEGIN")
        self._db.executemany("INSERT INTO spool (topic, key, value) VALUES (?, ?, ?)", items)
        self._depth += len(items)
        excess = self._depth - self.max_messages
        if excess > 0:
            self._db.execute("DELETE FROM spool WHERE id IN (SELECT id FROM spool ORDER BY id LIMIT ?)", (excess,))
            self._depth -= excess
            self.dropped += excess
        self._db.execute("COMMIT")
        self.available.set()
        return max(excess, 0)

    def _rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
        self._depth = int(self._db.execute("SELECT COUNT(*) FROM spool").fetchone()[0])

    def _drop_oldest(self, count: int) -> int:
        cursor = self._db.execute("DELETE FROM spool WHERE id IN (SELECT id FROM spool ORDER BY id LIMIT ?)", (count,))
        self._depth -= cursor.rowcount
        self.dropped += cursor.rowcount
        return cursor.rowcount

    def peek(self, limit: int) -> list[tuple[int, Item]]:
        """The oldest ``limit`` items with their ids, without removing them."""
        with self._lock:
            rows = self._db.execute("SELECT id, topic, key, value FROM spool ORDER BY id LIMIT ?", (limit,)).fetchall()
        return [(row[0], (row[1], row[2], bytes(row[3]))) for row in rows]

    def remove_through(self, last_id: int) -> None:
        """Forget every item up to and including ``last_id`` (they were acknowledged)."""
        with self._lock:
            cursor = self._db.execute("DELETE FROM spool WHERE id <= ?", (last_id,))
            self._depth -= cursor.rowcount
            if self._depth <= 0:
                self._depth = 0
                self.available.clear()

    def depth(self) -> int:
        return self._depth

    def close(self) -> None:
        with self._lock:
            self._db.close()
