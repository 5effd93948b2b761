"""What a batch path would pay before any detection work: `python benchmarks/scripts/batch_extract.py [--messages N]`.

Decodes N node-messages of the pipeline bench (8 GPUs each), then times, best of five, reading the fields the
windows and rules need from every GPU with one ``attrgetter`` per GPU, turning those tuples into one float64
array, and reading the GPU states. docs/benchmarks.md (Pipeline) quotes its output.
"""

from __future__ import annotations

import argparse
import operator
import time

import numpy as np

from sentinel import codec
from sentinel.events import TelemetrySample
from sentinel_bench.pipeline_samples import messages as _messages

FIELDS = operator.attrgetter("index", "temp_c", "power_w", "sm_clock_mhz", "util_gpu_pct", "ecc_sbe_volatile",
                             "pcie_replay", "row_remap_pending", "throttle_reasons", "ecc_dbe_volatile",
                             "row_remap_failure")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    n = parser.parse_args().messages
    samples = [codec.decode_as(m, TelemetrySample) for m in _messages(n, 1000)]
    best: dict[str, float] = {}
    for _ in range(5):
        started = time.perf_counter()
        rows = [FIELDS(g) for s in samples for g in s.gpus]
        read = time.perf_counter()
        np.array(rows, dtype=np.float64)  # None reads NaN
        stacked = time.perf_counter()
        [g.state for s in samples for g in s.gpus]
        done = time.perf_counter()
        for name, spent in (("attrgetter per GPU", read - started), ("np.array of the tuples", stacked - read),
                            ("GPU states", done - stacked)):
            best[name] = min(best.get(name, float("inf")), spent)
    for name, spent in best.items():
        print(f"{name}: {spent / n * 1e6:.2f} us per message")


if __name__ == "__main__":
    main()
