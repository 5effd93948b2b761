"""Read a server-telemetry benchmark folder: ``<machine>_train.csv.gz`` and ``<machine>_test.csv.gz`` per machine.

Format (SMD and ASD in ../shared/data, and any other folder laid out the same way): gzip CSV, one header line
of metric names, one row per sample in time order at a fixed interval, no timestamp column. The test file has
a 0/1 ``label`` column; a ``label`` column in the training file is dropped unread (training is unsupervised).
Both files must name the same metrics in the same order. Anything else raises ``ValidationError`` naming the
file and the problem.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from sentinel.errors import ValidationError

LABEL = "label"
TRAIN_SUFFIX, TEST_SUFFIX = "_train.csv.gz", "_test.csv.gz"


@dataclass(frozen=True)
class MachineData:
    name: str
    columns: list[str]
    train: npt.NDArray[np.float64]
    test: npt.NDArray[np.float64]
    labels: npt.NDArray[np.int8]


def default_data_dir(dataset: str) -> Path:
    """``$SENTINEL_DATA_DIR/<dataset>``, else ``../shared/data/<dataset>`` from the current directory."""
    root = os.environ.get("SENTINEL_DATA_DIR")
    return (Path(root) if root else Path("..") / "shared" / "data") / dataset


def machine_names(folder: Path) -> list[str]:
    """Machines with a training file in ``folder``, sorted; each must have its test file too."""
    if not folder.is_dir():
        raise ValidationError(f"{folder}: not a folder (expected <machine>{TRAIN_SUFFIX} and "
                              f"<machine>{TEST_SUFFIX} files)")
    names = sorted(p.name[: -len(TRAIN_SUFFIX)] for p in folder.glob(f"*{TRAIN_SUFFIX}"))
    if not names:
        raise ValidationError(f"{folder}: no <machine>{TRAIN_SUFFIX} files")
    missing = [n for n in names if not (folder / f"{n}{TEST_SUFFIX}").is_file()]
    if missing:
        raise ValidationError(f"{folder}: no test file for {', '.join(missing)} (expected <machine>{TEST_SUFFIX})")
    return names


def load_machine(folder: Path, name: str) -> MachineData:
    train_cols, train = _read(folder / f"{name}{TRAIN_SUFFIX}")
    test_cols, test = _read(folder / f"{name}{TEST_SUFFIX}")
    if LABEL not in test_cols:
        raise ValidationError(f"{folder / (name + TEST_SUFFIX)}: no '{LABEL}' column (header: "
                              f"{','.join(test_cols[:5])}{',...' if len(test_cols) > 5 else ''})")
    if LABEL in train_cols:
        keep = [i for i, c in enumerate(train_cols) if c != LABEL]
        train_cols, train = [train_cols[i] for i in keep], train[:, keep]
    at = test_cols.index(LABEL)
    labels = test[:, at]
    test_cols = [c for c in test_cols if c != LABEL]
    test = np.delete(test, at, axis=1)
    if test_cols != train_cols:
        only_train = sorted(set(train_cols) - set(test_cols))
        only_test = sorted(set(test_cols) - set(train_cols))
        detail = (f"only in train: {only_train or '-'}; only in test: {only_test or '-'}"
                  if only_train or only_test else "same names in a different order")
        raise ValidationError(f"{name}: train and test metrics differ ({detail})")
    if not np.isin(labels, (0, 1)).all():
        raise ValidationError(f"{folder / (name + TEST_SUFFIX)}: '{LABEL}' must be 0 or 1")
    if len(train) < 2 or len(test) < 1:
        raise ValidationError(f"{name}: need at least 2 training rows and 1 test row")
    return MachineData(name, train_cols, train, test, labels.astype(np.int8))


def _read(path: Path) -> tuple[list[str], npt.NDArray[np.float64]]:
    try:
        with gzip.open(path, "rt", newline="") as fh:
            header = fh.readline().strip()
            if not header:
                raise ValidationError(f"{path}: empty file (expected a header line of metric names)")
            columns = [c.strip() for c in header.split(",")]
            rows = np.loadtxt(fh, delimiter=",", dtype=np.float64, ndmin=2)
    except (OSError, EOFError) as exc:
        raise ValidationError(f"{path}: cannot read as gzip CSV: {exc}") from exc
    except ValueError as exc:
        raise ValidationError(f"{path}: not numeric CSV: {exc}") from exc
    if len(set(columns)) != len(columns):
        raise ValidationError(f"{path}: repeated column names in the header")
    if rows.size and rows.shape[1] != len(columns):
        raise ValidationError(f"{path}: {rows.shape[1]} values per row, {len(columns)} names in the header")
    if not np.isfinite(rows).all():
        raise ValidationError(f"{path}: NaN or infinite values (fill or drop them first)")
    return columns, rows.reshape(-1, len(columns))
