"""IsolationForest scoring without per-call overhead.

scikit-learn's ``score_samples`` validates its input and dispatches each of the forest's trees through joblib, which
costs ~18 ms per call whatever the batch size (measured: llama3-mix profile, 2,636 calls, 48 s). The detector
scores small batches every few seconds, so that overhead was most of its model time. This holds, per tree, the
path length of every leaf (depth plus the expected depth of the samples left in it, Liu et al. 2008) in one
array, and scores a batch with one ``apply`` per tree: the same numbers as ``score_samples`` (tested).
Built from public attributes only (``estimators_``, ``estimators_features_``, ``max_samples_``).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def average_path_length(n: np.ndarray) -> np.ndarray:
    """Expected path length of an unsuccessful search in a binary search tree of ``n`` items (c(n) in the paper)."""
    n = np.asarray(n, np.float64)
    out = np.zeros_like(n)
    out[n == 2] = 1.0
    big = n > 2
    out[big] = 2.0 * (np.log(n[big] - 1.0) + np.euler_gamma) - 2.0 * (n[big] - 1.0) / n[big]
    return out


def _depths(tree: Any) -> np.ndarray:
    depth = np.zeros(tree.node_count, np.float64)
    left, right = tree.children_left, tree.children_right
    for node in range(tree.node_count):  # children always have larger ids than their parent
        if left[node] >= 0:
            depth[left[node]] = depth[right[node]] = depth[node] + 1.0
    return depth


class IsolationPaths:
    def __init__(self, forest: Any) -> None:
        self.trees = [est.tree_ for est in forest.estimators_]
        self.features = [np.asarray(f, np.intp) for f in forest.estimators_features_]
        self.all_features = all(len(f) == forest.n_features_in_ for f in self.features)
        self.leaf_path = [_depths(t) + average_path_length(t.n_node_samples) for t in self.trees]
        self.norm = len(self.trees) * float(average_path_length(np.array([forest.max_samples_]))[0])

    def score(self, x: np.ndarray) -> np.ndarray:
        """Anomaly score in (0, 1], higher is more anomalous (``-score_samples``)."""
        x32 = np.ascontiguousarray(x, np.float32)
        depth = np.zeros(len(x32))
        for tree, feats, path in zip(self.trees, self.features, self.leaf_path, strict=True):
            rows = x32 if self.all_features else np.ascontiguousarray(x32[:, feats])
            depth += path[tree.apply(rows)]
        return np.power(2.0, -depth / self.norm)
