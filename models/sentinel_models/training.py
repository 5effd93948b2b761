"""Labelled training rows from a fleet's telemetry: the same features the detector computes, at a stride, with
``y = 1`` when the GPU (or its node, for node-wide faults) fails within the horizon.

Input is a stream of steps, each a mapping of fleet-wide arrays named as in ``models.fields`` (the windows' layout)
(GPU fields (N, G), node fields (N,), ``throttle`` (N, G), ``lost`` (N, G)), plus ``t_s`` and ``logs``
((node, gpu, xid) tuples). The simulator's steps and its on-disk exports (``sentinel sim export``) both have
that shape; nothing here imports the simulator.

Rows of a node after its first failure are left out: in a real fleet that node is drained and repaired, so what
its telemetry does afterwards says nothing about the next failure. Lost GPUs give no rows (there is nothing to
predict). Healthy rows are many and alike: a random ``negative_share`` of them is kept and weighted by its
inverse, so probabilities stay calibrated to the real base rate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sentinel_models.features import FEATURES, XID_AGE_CAP_S, DeviationBaseline, FleetScale, gpu_features
from sentinel_models.fields import GPU_FIELDS, NODE_FIELDS, PRECURSOR_XIDS

Step = Mapping[str, Any]


@dataclass(frozen=True)
class Failure:
    node: int  # index into the fleet's node axis
    gpu: int  # -1: every GPU of the node (InfiniBand port, host)
    failure_s: float  # on the steps' ``t_s`` axis


@dataclass
class Dataset:
    x: np.ndarray  # (rows, len(FEATURES))
    y: np.ndarray  # (rows,) 0/1
    weight: np.ndarray  # (rows,) inverse sampling share
    node: np.ndarray  # (rows,) node index, to split by node
    t_s: np.ndarray  # (rows,)
    features: tuple[str, ...] = FEATURES

    @property
    def positives(self) -> int:
        return int(self.y.sum())


def build_dataset(steps: Iterable[Step], failures: list[Failure], window: int = 60, stride: int = 6,
                  horizon_s: float = 7200.0, negative_share: float = 0.02, seed: int = 0,
                  progress: Callable[[float], None] | None = None, total_steps: int | None = None) -> Dataset:
    rng = np.random.default_rng(seed)
    buffer: deque[Step] = deque(maxlen=window)
    first_failure: dict[int, float] = {}
    for f in failures:
        first_failure[f.node] = min(first_failure.get(f.node, np.inf), f.failure_s)
    xs, ys, ws, nodes, times = [], [], [], [], []
    last_xid: np.ndarray | None = None
    baseline = DeviationBaseline()  # updated at every scoring step, as the detector does
    spread = FleetScale()
    for k, step in enumerate(steps):
        buffer.append(step)
        if last_xid is None:
            last_xid = np.full(np.shape(step["temp_c"]), -np.inf)
        for node, gpu, xid, *_ in step["logs"]:
            if xid in PRECURSOR_XIDS and gpu >= 0:
                last_xid[node, gpu] = step["t_s"]
        if len(buffer) < window or k % stride:
            continue
        t = float(step["t_s"])
        series = stack(buffer)
        feats = baseline.apply(gpu_features(series, np.clip(t - last_xid, 0.0, XID_AGE_CAP_S)), t)
        spread.apply(feats, t)
        n, g, _ = feats.shape
        label = np.zeros((n, g), bool)
        for f in failures:
            if t < f.failure_s <= t + horizon_s:
                label[f.node, :] |= f.gpu < 0
                if f.gpu >= 0:
                    label[f.node, f.gpu] = True
        dead = np.array([t >= first_failure.get(i, np.inf) for i in range(n)])
        valid = ~np.asarray(step["lost"], bool) & ~dead[:, None]
        keep = valid & (label | (rng.random((n, g)) < negative_share))
        rows = np.flatnonzero(keep.ravel())
        xs.append(feats.reshape(n * g, -1)[rows])
        ys.append(label.ravel()[rows])
        ws.append(np.where(label.ravel()[rows], 1.0, 1.0 / negative_share))
        nodes.append(np.repeat(np.arange(n), g)[rows])
        times.append(np.full(len(rows), t))
        if progress is not None and total_steps:
            progress(k / total_steps)
    if not xs:
        raise ValueError(f"no training rows: the data has fewer steps than one window ({window})")
    return Dataset(np.concatenate(xs), np.concatenate(ys).astype(np.int8), np.concatenate(ws),
                   np.concatenate(nodes), np.concatenate(times))


def stack(buffer: Iterable[Step]) -> dict[str, np.ndarray]:
    """The buffered steps as the named (T, N, ...) arrays ``gpu_features`` takes; lost GPUs read NaN, as in the
    detector's windows (a lost GPU reports nothing)."""
    steps = list(buffer)
    lost = np.stack([np.asarray(s["lost"], bool) for s in steps])
    out: dict[str, np.ndarray] = {}
    for name in GPU_FIELDS:
        out[name] = np.where(lost, np.nan, np.stack([np.asarray(s[name], np.float64) for s in steps]))
    out["throttle"] = np.where(lost, 0, np.stack([np.asarray(s["throttle"], np.int64) for s in steps]))
    out["ts"] = np.array([float(s["t_s"]) for s in steps])
    for name in NODE_FIELDS[1:]:
        out[name] = np.stack([np.asarray(s[name], np.float64) for s in steps])
    return out


def combine(parts: list[Dataset]) -> Dataset:
    """One dataset from several sources, their nodes kept apart for the by-node validation split."""
    if len(parts) == 1:
        return parts[0]
    offset, nodes = 0, []
    for p in parts:
        nodes.append(p.node + offset)
        offset += int(p.node.max()) + 1
    return Dataset(np.concatenate([p.x for p in parts]), np.concatenate([p.y for p in parts]),
                   np.concatenate([p.weight for p in parts]), np.concatenate(nodes),
                   np.concatenate([p.t_s for p in parts]))
