"""Per-node host-anomaly state on disk, so that a restarted detector does not start cold.

One ``<node>.npz`` per node under ``detector.host_anomaly.state_dir`` (numpy's archive of plain arrays, read
with ``allow_pickle=False``): the node's history rows and, once fitted, its model (which metrics, their
normalisation, the model's medians, scales and tails) and threshold. Written atomically (temporary file, then
rename), so a crash leaves the previous file. A file that cannot be read, is of another format version, or was
written with another row interval is ignored and the node starts cold, logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sentinel_models.server_anomaly import EwmaState, ServerAnomalyConfig, ServerAnomalyModel

log = logging.getLogger(__name__)
VERSION = 1
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class HostFit:
    """A node's fitted model: ``metrics`` index HOST_METRICS; rows are scaled ``(x - low) / span`` first."""

    metrics: tuple[int, ...]
    low: Array
    span: Array
    model: ServerAnomalyModel
    threshold: float
    fitted_ts: float


@dataclass(frozen=True)
class Saved:
    rows: Array
    fit: HostFit | None
    last_alert_ts: float
    last_row_ts: float  # end of the newest row kept: rows replayed after a restart are not added twice


class HostStateFiles:
    def __init__(self, folder: str | Path, interval_s: float) -> None:
        self.folder = Path(folder)
        self.interval_s = interval_s

    def path(self, node: str) -> Path:
        """The node's file; names that are not plain file names are hashed."""
        name = node if _SAFE.fullmatch(node) else "sha256-" + hashlib.sha256(node.encode()).hexdigest()
        return self.folder / f"{name}.npz"

    def save(self, node: str, rows: Array, fit: HostFit | None, last_alert_ts: float, last_row_ts: float) -> None:
        meta = {"version": VERSION, "node": node, "interval_s": self.interval_s, "last_alert_ts": last_alert_ts,
                "last_row_ts": last_row_ts}
        arrays: dict[str, Any] = {"rows": rows.astype(np.float32)}  # Any: savez's keywords include allow_pickle
        if fit is not None:
            m = fit.model
            meta |= {"columns": m.columns, "threshold": fit.threshold, "fitted_ts": fit.fitted_ts,
                     "alpha": m.config.alpha, "top_k": m.config.top_k}
            arrays |= {"metrics": np.asarray(fit.metrics, dtype=np.int64), "low": fit.low, "span": fit.span,
                       "center": m.center, "scale": m.scale, "tail": m.tail}
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.path(node)
        temporary = target.with_suffix(".tmp.npz")
        with open(temporary, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, target)

    def load(self, node: str) -> Saved | None:
        target = self.path(node)
        if not target.is_file():
            return None
        try:
            with np.load(target, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                if meta.get("version") != VERSION or meta.get("node") != node \
                        or meta.get("interval_s") != self.interval_s:
                    log.warning("host anomaly: %s is of another version, node or interval; starting cold", target)
                    return None
                fit = None
                if "metrics" in data:
                    config = ServerAnomalyConfig(alpha=meta["alpha"], top_k=meta["top_k"])
                    model = ServerAnomalyModel(list(meta["columns"]), data["center"], data["scale"], data["tail"],
                                               config, EwmaState(np.zeros(len(meta["columns"]))))
                    fit = HostFit(tuple(int(i) for i in data["metrics"]), data["low"], data["span"], model,
                                  float(meta["threshold"]), float(meta["fitted_ts"]))
                return Saved(data["rows"].astype(np.float64), fit, float(meta["last_alert_ts"]),
                             float(meta["last_row_ts"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("host anomaly: cannot read %s (%s); starting cold", target, exc)
            return None
