"""Cluster load traces in the Helios format: one CSV (optionally gzipped) per virtual cluster, a ``time`` column
(``YYYY-MM-DD HH:MM:SS``) and at least ``running_gpu_num`` and ``pending_gpu_num`` (``total_gpu_num``, the
capacity, when present). Rows at any resolution up to the bin width are binned the way the live recorder bins:
each bin holds the last row inside it (the queue as it stood when the bin closed); an empty bin repeats the
previous one. Files without those columns (e.g. ``Earth_gpu_number.csv``) are skipped and named.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from sentinel.capacity.bins import BIN_S
from sentinel.errors import ValidationError
from sentinel_models.forecast import LoadSeries

REQUIRED = ("time", "running_gpu_num", "pending_gpu_num")
COLUMNS = {"running_gpu_num": "running_gpus", "pending_gpu_num": "pending_gpus"}


def _open(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")  # noqa: SIM115 - closed by the caller's with


def _ts(text: str, path: Path, line: int) -> float:
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise ValidationError(f"{path.name}:{line}: time {text!r} is not YYYY-MM-DD HH:MM:SS") from None


def read_trace(path: Path, bin_s: float = BIN_S) -> LoadSeries | None:
    """One file as binned series, or None when it lacks the columns of this format."""
    with _open(path) as fh:
        reader = csv.DictReader(fh)
        if not set(REQUIRED) <= set(reader.fieldnames or ()):
            return None
        cap_col = "total_gpu_num" if "total_gpu_num" in (reader.fieldnames or ()) else None
        rows: dict[int, tuple[float, float, float]] = {}
        for line, row in enumerate(reader, start=2):
            try:
                values = (float(row["running_gpu_num"]), float(row["pending_gpu_num"]),
                          float(row[cap_col]) if cap_col and row[cap_col] != "" else np.nan)
            except (TypeError, ValueError):
                raise ValidationError(f"{path.name}:{line}: a GPU count is not a number") from None
            rows[int(_ts(row["time"], path, line) // bin_s)] = values  # later rows win: the bin's last row
    if not rows:
        raise ValidationError(f"{path.name}: no rows")
    first, last = min(rows), max(rows)
    out = np.empty((last - first + 1, 3))
    prev = rows[first]
    for i, b in enumerate(range(first, last + 1)):
        prev = rows.get(b, prev)
        out[i] = prev
    ts = (np.arange(first, last + 1) * bin_s).astype(float)
    name = path.name.split(".")[0].removesuffix("_cluster_sequence")
    return LoadSeries.build(name, ts, capacity=None if np.isnan(out[:, 2]).all() else out[:, 2],
                            running_gpus=out[:, 0], pending_gpus=out[:, 1])


def read_traces(folder: Path, progress: Callable[[str], None] | None = None) -> tuple[list[LoadSeries], list[str]]:
    """Every trace in ``folder`` (sorted by name) and the names of the files skipped."""
    if not folder.is_dir():
        raise ValidationError(f"--data {folder}: not a folder")
    files = sorted(p for p in folder.iterdir() if p.name.endswith((".csv", ".csv.gz")))
    series, skipped = [], []
    for path in files:
        if progress:
            progress(f"reading {path.name}")
        got = read_trace(path)
        if got is None:
            skipped.append(path.name)
        else:
            series.append(got)
    if not series:
        raise ValidationError(f"--data {folder}: no CSV with columns {', '.join(REQUIRED)}")
    return series, skipped
