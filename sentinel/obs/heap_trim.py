"""Give memory a long-running service has freed back to the kernel: collect young reference cycles, then trim
the heap (glibc's ``malloc_trim``).

glibc keeps what a process frees in its heaps for reuse, so after a burst of large polls (the consumer catching
up after a slow broker: thousands of decoded samples and fetch buffers at once) a detector's RSS stays at the
burst's peak, and the next, larger burst raises it again: RSS then tracks the largest backlog seen, not what the
process holds. Measured with the detector and a fleet of 1,250 nodes at 1 Hz on one tansu broker, in one
process: RSS 328–376 MiB before a trim, 261–324 MiB after, each trim 2–11 ms (docs/benchmarks.md, Soak).
The detector trims at most every ``TRIM_INTERVAL_S`` (10 s: at once a minute the soak saw RSS climb
by ~50 MiB between trims). Without glibc (musl, macOS) the trim is a no-op.

Before each trim the two young generations of Python's cycle collector are collected: kafka-python leaves every
poll's fetch responses in reference cycles (a timeout exception and its traceback, futures with callbacks), and
with the detector's relaxed thresholds (``relax_gc``) a collection reached them about once a minute: the soak's
detector RSS rose by ~90 MiB and fell back every minute. The old generation is left to the collector's own
schedule (a full collection walks every window).
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections.abc import Callable

TRIM_INTERVAL_S = 10.0


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the C library this process runs on
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


class HeapTrim:
    """Collects the young generations and calls ``malloc_trim(0)`` when ``maybe`` finds ``interval_s`` passed
    since the last call."""

    def __init__(self, interval_s: float = TRIM_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._trim = _malloc_trim()
        self._last = clock()
        self.trims = 0

    @property
    def available(self) -> bool:
        return self._trim is not None

    def now(self) -> None:
        """Collect young cycles and trim at once (the trim where glibc is the C library)."""
        gc.collect(1)
        if self._trim is not None:
            self._trim(0)
            self.trims += 1
        self._last = self.clock()

    def maybe(self) -> bool:
        """Collect and trim if the interval has passed; True when it did."""
        if self.clock() - self._last < self.interval_s:
            return False
        self.now()
        return True
