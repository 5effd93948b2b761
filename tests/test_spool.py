"""The agent's on-disk spool: FIFO, bounded (drops the oldest, counted), and it survives a restart."""

from __future__ import annotations

import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel.config import from_mapping
from sentinel.daemon import run_agent
from sentinel.obs.metrics import Metrics
from sentinel_bench.brokers import free_port
from sentinel_collectors.agent import Slot
from sentinel_collectors.host import HostCollector
from sentinel_collectors.spool import Spool


def _items(start: int, n: int) -> list[tuple[str, str | None, bytes]]:
    return [("sentinel.telemetry", "n1", str(i).encode()) for i in range(start, start + n)]


def test_items_leave_in_the_order_they_came(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db")
    spool.append(_items(0, 5))
    spool.append(_items(5, 5))
    batch = spool.peek(7)
    assert [v for _, (_, _, v) in batch] == [str(i).encode() for i in range(7)]
    spool.remove_through(batch[-1][0])
    assert spool.depth() == 3 and [v for _, (_, _, v) in spool.peek(10)] == [b"7", b"8", b"9"]


def test_a_full_spool_drops_the_oldest_and_counts_them(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db", max_messages=10)
    assert spool.append(_items(0, 8)) == 0
    assert spool.append(_items(8, 5)) == 3
    assert spool.dropped == 3 and spool.depth() == 10
    assert [v for _, (_, _, v) in spool.peek(100)] == [str(i).encode() for i in range(3, 13)]


def test_what_was_spooled_survives_a_restart(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db")
    spool.append(_items(0, 4))
    spool.close()
    again = Spool(tmp_path / "s.db")
    assert again.depth() == 4 and again.available.is_set()
    assert [v for _, (_, _, v) in again.peek(10)] == [b"0", b"1", b"2", b"3"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=30), max_size=15), st.integers(min_value=1, max_value=40))
def test_the_spool_never_holds_more_than_its_bound_and_keeps_the_newest(sizes: list[int], bound: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        spool = Spool(Path(tmp) / "s.db", max_messages=bound)
        total = 0
        for n in sizes:
            spool.append(_items(total, n))
            total += n
            assert spool.depth() <= bound
        expected = [str(i).encode() for i in range(max(0, total - bound), total)]
        assert [v for _, (_, _, v) in spool.peek(bound + 10)] == expected
        assert spool.dropped == max(0, total - bound)
        spool.close()


def test_the_agent_exports_samples_spool_depth_and_publish_failures(tmp_path: Path) -> None:
    port = free_port()
    config = from_mapping({
        "agent": {"node": "gpu-node-009", "interval_s": 0.05, "spool_path": str(tmp_path / "a.spool"),
                  "spool_max_messages": 20, "metrics_listen": f"127.0.0.1:{port}"},
        "transport": {"kind": "kafka", "kafka": {"bootstrap": f"127.0.0.1:{free_port()}", "send_timeout_s": 0.5}},
    })
    stop, metrics = threading.Event(), Metrics()
    slots = [Slot("host", "host", HostCollector().read, 0.05)]
    thread = threading.Thread(target=run_agent, args=(config, stop), kwargs={"slots": slots, "metrics": metrics})
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while metrics.spool_dropped._value.get() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        stop.set()
        thread.join(30)
    assert "sentinel_agent_samples_total" in text and "sentinel_spool_messages 20.0" in text
    assert metrics.spool_dropped._value.get() > 0  # the broker never came: oldest samples dropped, sampling went on
    assert "sentinel_agent_cycle_duration_seconds_bucket" in text
    assert 'sentinel_publish_failures_total' in text


class _SlowBroker:
    """A transport that refuses batches larger than it can take in time (a slow broker after an outage)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.taken = limit, []

    def publish_batch(self, messages):  # type: ignore[no-untyped-def]
        from sentinel.errors import TransportError

        batch = list(messages)
        if len(batch) > self.limit:
            raise TransportError("request timed out")
        self.taken.extend(batch)


def _run_until_drained(publisher: Any, spool: Spool, timeout_s: float = 30.0) -> None:
    """Run the publisher's thread until the spool is empty (or ``timeout_s``), then stop it."""
    stop = threading.Event()
    thread = publisher.start(stop)
    deadline = time.monotonic() + timeout_s
    while spool.depth() and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(10)


def test_a_backlog_drains_in_smaller_batches_when_big_ones_time_out(tmp_path: Path) -> None:
    from sentinel_collectors.publisher import SpoolPublisher

    spool = Spool(tmp_path / "s.db")
    spool.append(_items(0, 1000))
    broker = _SlowBroker(limit=60)
    publisher = SpoolPublisher(spool, broker, Metrics(), batch=500)  # type: ignore[arg-type]
    _run_until_drained(publisher, spool)
    assert spool.depth() == 0
    assert [v for _, _, v in broker.taken] == [str(i).encode() for i in range(1000)]  # all, in order, once


class _BrokenClient:
    """A transport whose client raises what is not a TransportError (a mistyped Kafka client key), twice."""

    def __init__(self) -> None:
        self.calls, self.taken = 0, []

    def publish_batch(self, messages):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls <= 2:
            raise TypeError("__init__() got an unexpected keyword argument 'sasl_mechanizm'")
        self.taken.extend(messages)


def test_the_publisher_survives_an_error_that_is_not_a_transport_error_and_counts_it(tmp_path: Path) -> None:
    from sentinel_collectors.publisher import SpoolPublisher

    spool = Spool(tmp_path / "s.db")
    spool.append(_items(0, 10))
    broker, metrics = _BrokenClient(), Metrics()
    publisher = SpoolPublisher(spool, broker, metrics, max_backoff_s=0.05)  # type: ignore[arg-type]
    _run_until_drained(publisher, spool)
    assert spool.depth() == 0 and len(broker.taken) == 10  # the thread lived on and sent everything, once
    assert metrics.publish_failures.labels("TypeError")._value.get() == 2


def test_a_full_disk_drops_the_oldest_spooled_samples_and_counts_them_instead_of_raising(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db", max_messages=1_000_000)
    spool._db.execute("PRAGMA max_page_count = 40")  # SQLite's own limit: the file cannot grow, as on a full disk
    blob = b"x" * 2000
    total, dropped = 0, 0
    for k in range(200):
        dropped += spool.append([("sentinel.telemetry", "n1", blob + str(k).encode())])
        total += 1
    assert dropped > 0 and spool.dropped == dropped
    assert spool.depth() == total - dropped
    newest = spool.peek(10_000)[-1][1][2]
    assert newest == blob + b"199"  # the newest sample is kept; room was made by dropping the oldest
    spool.close()
