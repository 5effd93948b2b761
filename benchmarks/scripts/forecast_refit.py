"""What one refit of a partition's forecaster costs, and the blob it stores:
`python benchmarks/scripts/forecast_refit.py [--data DIR] [--runs N]`.

Loads the newest 28 days of the largest Helios cluster in ``--data`` into a fresh SQLite store as load bins of
partition ``all``, then ``runs`` times drops the stored forecaster and calls
``sentinel.capacity.forecast.resident.refresh`` (what the load recorder of ``sentinel controller`` /
``sentinel run`` does once 6 new bins arrived: every horizon, and since issue 21 the quantile models with it),
timing each; then stores 6 more bins and times the hourly refit that follows (the point forecaster refitted, the
stored quantile models kept: they are refitted once a day). Prints the times and the stored blob's size. The
first run includes importing scikit-learn.
docs/benchmarks.md (Forecast CLI) quotes its output.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from sentinel.capacity.bins import ALL, LoadBin
from sentinel.capacity.bins_store import record_load_bins, stored_forecaster
from sentinel.capacity.forecast import resident
from sentinel.store.engine import make_engine, upgrade
from sentinel_bench.traces import read_traces

BINS = 28 * 144


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/helios/earth_vc_minute", help="Helios cluster CSVs")
    parser.add_argument("--runs", type=int, default=2, help="refits to time (default 2)")
    args = parser.parse_args()
    series, _ = read_traces(Path(args.data), lambda _text: None)
    s = max(series, key=lambda x: float(np.nanmax(x.capacity)))
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{tmp}/refit.db")
        upgrade(engine)
        def record(first: int, last: int) -> None:
            record_load_bins(engine, [LoadBin(float(s.ts[i]), ALL, float(s.columns["running_gpus"][i]),
                                              float(s.columns["pending_gpus"][i]), None, float(s.capacity[i]), 0.0,
                                              "trace") for i in range(first, last)])

        record(len(s) - BINS - 6, len(s) - 6)
        times = []
        for _ in range(args.runs):
            with engine.begin() as conn:
                conn.exec_driver_sql("DELETE FROM forecast_models")
            started = time.perf_counter()
            resident.refresh(engine)
            times.append(round(time.perf_counter() - started, 2))
        row = stored_forecaster(engine, ALL)
        size = len(bytes(row["blob"])) if row else 0
        record(len(s) - 6, len(s))
        started = time.perf_counter()
        done = resident.refresh(engine)
        hourly = round(time.perf_counter() - started, 2)
    print(f"cluster {s.name}, {BINS} bins: refit {', '.join(map(str, times))} s; blob {size} bytes; "
          f"an hour later ({done[ALL]}, quantile models kept) {hourly} s")


if __name__ == "__main__":
    main()
