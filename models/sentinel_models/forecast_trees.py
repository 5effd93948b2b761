"""Fitted gradient-boosting models as plain numpy arrays: evaluated without scikit-learn and stored as bytes.

Why: importing scikit-learn costs about a second, more than everything else ``sentinel forecast`` does on a
10,000-node fleet. scikit-learn is needed to *fit*; a fitted ``HistGradientBoostingRegressor`` is a constant
plus a sum of binary trees over raw feature values, which numpy evaluates in a few milliseconds. So the
forecaster converts every model right after fitting and only ever predicts with ``Trees``: a forecast from a
model fitted in this process and one loaded from the store are the same computation.

The conversion reads scikit-learn's fitted-tree arrays (``_predictors``, ``_baseline_prediction``; stable since
1.0, pinned by ``tests/test_forecast_trees.py`` against ``predict``). Categorical splits are not supported (the
forecaster has none). The rule per node is scikit-learn's: NaN goes where ``missing_go_to_left`` says, else
``x <= threshold`` goes left.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np

_FIELDS = ("feature", "threshold", "missing_left", "left", "right", "leaf", "value")


@dataclass(frozen=True)
class Trees:
    """Every tree's nodes concatenated; ``roots[i]`` is the index of tree ``i``'s first node."""

    baseline: float
    roots: np.ndarray  # int64
    feature: np.ndarray  # int64, per node
    threshold: np.ndarray  # float64
    missing_left: np.ndarray  # bool
    left: np.ndarray  # int64, absolute node index
    right: np.ndarray  # int64
    leaf: np.ndarray  # bool
    value: np.ndarray  # float64 (leaf values; the learning rate is already applied)
    depth: int

    @classmethod
    def from_sklearn(cls, model: Any) -> Trees:
        """A fitted single-output ``HistGradientBoostingRegressor`` (identity link) as arrays."""
        parts: dict[str, list[np.ndarray]] = {k: [] for k in _FIELDS}
        roots, offset, depth = [], 0, 0
        for (predictor,) in model._predictors:  # one tree per iteration for a single output
            nodes = predictor.nodes
            if nodes["is_categorical"].any():
                raise ValueError("categorical splits are not supported")
            roots.append(offset)
            parts["feature"].append(nodes["feature_idx"].astype(np.int64))
            parts["threshold"].append(nodes["num_threshold"].astype(np.float64))
            parts["missing_left"].append(nodes["missing_go_to_left"].astype(bool))
            parts["left"].append(nodes["left"].astype(np.int64) + offset)
            parts["right"].append(nodes["right"].astype(np.int64) + offset)
            parts["leaf"].append(nodes["is_leaf"].astype(bool))
            parts["value"].append(nodes["value"].astype(np.float64))
            depth = max(depth, int(nodes["depth"].max()))
            offset += len(nodes)
        arrays = {k: np.concatenate(v) if v else np.zeros(0) for k, v in parts.items()}
        return cls(baseline=float(np.ravel(model._baseline_prediction)[0]), roots=np.asarray(roots, np.int64),
                   depth=depth, **arrays)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The model's prediction for each row of ``X`` (raw feature values, float)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError("X must be 2-D")
        n = X.shape[0]
        if n == 0 or self.roots.size == 0:
            return np.full(n, self.baseline)
        node = np.broadcast_to(self.roots, (n, self.roots.size)).copy()  # rows x trees
        rows = np.arange(n)[:, None]
        for _ in range(self.depth):
            inner = ~self.leaf[node]
            if not inner.any():
                break
            x = X[rows, np.where(inner, self.feature[node], 0)]
            left = np.where(np.isnan(x), self.missing_left[node], x <= self.threshold[node])
            node = np.where(inner, np.where(left, self.left[node], self.right[node]), node)
        return self.baseline + self.value[node].sum(axis=1)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        out = {f"{prefix}{k}": getattr(self, k) for k in (*_FIELDS, "roots")}
        out[f"{prefix}meta"] = np.array([self.baseline, float(self.depth)])
        return out

    @classmethod
    def from_arrays(cls, data: Any, prefix: str) -> Trees:
        meta = data[f"{prefix}meta"]
        return cls(baseline=float(meta[0]), depth=int(meta[1]),
                   **{k: np.asarray(data[f"{prefix}{k}"]) for k in (*_FIELDS, "roots")})


def to_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]  # numpy stubs type allow_pickle as a kwarg
    return buf.getvalue()


def from_bytes(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}
