"""HeapTrim gives freed heap memory back to the kernel on this glibc machine, at most once per interval."""

from __future__ import annotations

import os
from pathlib import Path

from sentinel.obs.heap_trim import HeapTrim


def _rss() -> int:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_freed_heap_memory_goes_back_to_the_kernel() -> None:
    trim = HeapTrim()
    assert trim.available  # glibc here (the Debian images we run on)
    trim.now()
    blocks = [bytes(2048) for _ in range(100_000)]  # ~200 MB from malloc's heap (below the mmap threshold)
    kept = blocks[::100]  # keep 1 in 100, spread over the heap: it cannot shrink from its top ...
    del blocks
    before = _rss()
    trim.now()
    after = _rss()
    assert len(kept) == 1000
    assert before - after > 100 * 2**20, (before, after)  # ... but the free pages inside it are returned


def test_at_most_once_per_interval() -> None:
    t = [0.0]
    trim = HeapTrim(interval_s=60.0, clock=lambda: t[0])
    assert not trim.maybe()
    t[0] = 59.0
    assert not trim.maybe()
    t[0] = 60.0
    assert trim.maybe() and trim.trims == 1
    assert not trim.maybe()


class _Node:
    def __init__(self) -> None:
        self.buffer = bytearray(8 * 2**20)
        self.me = self  # a reference cycle: reference counting never frees it


def test_young_reference_cycles_are_collected_before_the_trim() -> None:
    """kafka-python leaves each poll's fetch responses in reference cycles (exceptions with their tracebacks,
    futures): with the detector's relaxed GC thresholds they waited about a minute for a collection, ~90 MiB of
    RSS at the soak's rate. A trim first collects the young generations."""
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        node = _Node()
        gone = weakref.ref(node)
        del node
        assert gone() is not None  # only a collection can free it
        HeapTrim().now()
        assert gone() is None
    finally:
        gc.enable()
