"""Job traces for ``bench forecast-jobs``: one CSV (optionally gzipped), one row per job, with submit, start and
end times in seconds and a GPU count under column names the caller gives, so traces in other formats work
unchanged. An empty start means the job never ran (it waited from submit until its end, when it was withdrawn);
an empty end means it had not ended when the trace stopped. Rows asking for no GPUs are dropped: they never
hold or wait for a GPU.
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

import numpy as np

from sentinel.errors import ValidationError
from sentinel_models.job_forecast import Jobs


def _open(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")  # noqa: SIM115 - closed by the caller's with


def _num(text: str | None, path: Path, line: int, column: str) -> float:
    if text is None or text.strip() == "":
        return float("nan")
    try:
        return float(text)
    except ValueError:
        raise ValidationError(f"{path.name}:{line}: {column} {text!r} is not a number") from None


def read_jobs(path: Path, submit: str, start: str, end: str, gpus: str, limit: str | None = None) -> Jobs:
    if not path.is_file():
        raise ValidationError(f"--trace {path}: no such file")
    wanted = [c for c in (submit, start, end, gpus, limit) if c]
    with _open(path) as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in wanted if c not in (reader.fieldnames or ())]
        if missing:
            raise ValidationError(f"--trace {path.name}: no column {', '.join(missing)} (columns: "
                                  f"{', '.join(reader.fieldnames or ())})")
        rows = [[_num(row[c], path, line, c) for c in wanted] for line, row in enumerate(reader, start=2)]
    if not rows:
        raise ValidationError(f"--trace {path.name}: no rows")
    a = np.array(rows, dtype=float)
    keep = (a[:, 3] > 0) & np.isfinite(a[:, 0])
    if not keep.any():
        raise ValidationError(f"--trace {path.name}: no job with a submit time and GPUs")
    a = a[keep]
    return Jobs(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4] if limit else None)
