"""The hazard model inside the detector: once per ``score_interval_s`` of sample time (slots aligned to multiples
of it, so the fleet's nodes fall due together and are scored in few, large batches), each node's window becomes
one feature row per GPU, all due nodes are scored in one batch, and a GPU whose probability stays at or above
the threshold for ``consecutive`` scorings becomes a finding (checkpoint, then drain). The IsolationForest's
anomaly score does the same for alerts. Episodes end when the probability falls below half the threshold.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from sentinel.config import HazardConfig
from sentinel.detector.findings import make_finding
from sentinel.detector.windows import GPU_FIELDS, NODE_FIELDS, NodeWindow
from sentinel.events import EvidenceValue, Finding, FindingClass, Recommendation, Severity
from sentinel_models import persistence, shipped
from sentinel_models.features import (
    FEATURES,
    XID_AGE_CAP_S,
    DeviationBaseline,
    FleetScale,
    any_physical_signal,
    gpu_features,
    physical_evidence,
)
from sentinel_models.hazard import HazardModel

_OWN = FEATURES.index("temp_dev_excess")  # NaN when the GPU gave no reading in the window
# Full windows stacked per gpu_features pass: a fleet's nodes fall due together (aligned slots), and stacking all
# of them at once raised the peak RSS by ~40 MiB at 1,250 nodes (in process) for float64 temporaries.
STACK_NODES = 256


class HazardScorer:
    def __init__(self, model: HazardModel, config: HazardConfig, name: str, created_ts: float = 0.0) -> None:
        self.model = model
        self.config = config
        self.name = name
        self.created_ts = created_ts
        self.scored: dict[str, float] = {}  # node -> its riskiest GPU's probability, from the last batch
        self.score_s = 0.0  # time spent computing features and scoring (benchmarks report rows/s)
        self.threshold = config.threshold or model.threshold
        self.last_scored: dict[str, int] = {}  # node -> the slot (sample time // score_interval_s) last scored
        self.streak: dict[tuple[str, str, int], int] = {}  # (kind, node, gpu) -> scorings in a row above
        self.open: dict[tuple[str, str, int], int] = {}  # open episodes: 1 alerted, 2 checkpoint and drain asked
        self.rows_scored = 0
        self.baselines: dict[str, DeviationBaseline] = {}  # node -> its GPUs' long-run deviation from peers
        self.spread = FleetScale()  # the fleet's spread of those deviations

    def due(self, node: str, window: NodeWindow) -> bool:
        return (window.count >= max(2, window.size // 2)
                and self._slot(window.last_ts) > self.last_scored.get(node, -(2**62)))

    def _slot(self, ts: float) -> int:
        return int(ts // self.config.score_interval_s)

    def score(self, windows: dict[str, NodeWindow], nodes: list[str], now: float) -> list[Finding]:
        """Score the due ``nodes`` in one batch; return the findings of episodes that start now."""
        due = [n for n in dict.fromkeys(nodes) if self.due(n, windows[n])]
        self.scored = {}
        if not due:
            return []
        started = time.perf_counter()
        blocks: list[np.ndarray] = []
        where: list[tuple[str, int]] = []
        for node, feats in _features(windows, due):
            window = windows[node]
            self.last_scored[node] = self._slot(window.last_ts)
            self.baselines.setdefault(node, DeviationBaseline()).apply(feats, window.last_ts)
            alive = [g for g in range(feats.shape[0]) if g not in window.lost and not np.isnan(feats[g, _OWN])]
            blocks.append(feats[alive])
            where.extend((node, g) for g in alive)
        x = np.vstack(blocks) if blocks else np.zeros((0, len(self.model.features)))
        self.spread.apply(x, max(windows[n].last_ts for n in due))
        evidence = physical_evidence(x)
        signal = any_physical_signal(x)
        self.rows_scored += len(x)
        p = self.model.probability(x)
        anomaly = self.model.anomaly_score(x) if self.config.anomalies else np.zeros(len(x))
        self.score_s += time.perf_counter() - started
        for (node, _), probability in zip(where, p, strict=True):
            self.scored[node] = max(self.scored.get(node, 0.0), min(max(float(probability), 0.0), 1.0))
        out: list[Finding] = []
        for i, (node, gpu) in enumerate(where):
            ts = windows[node].last_ts
            # Two physical signals agree: checkpoint and drain; one: alert; none: the score is only a metric.
            level = 2 if evidence[i] else 1
            above = p[i] >= self.threshold and bool(signal[i])  # two agreeing signals are signals too
            if self._episode("hazard", node, gpu, above, p[i] < self.threshold / 2, level):
                out.append(self._hazard(node, gpu, ts, now, float(p[i]), x[i], bool(evidence[i])))
            if self.config.anomalies and self._episode("anomaly", node, gpu, anomaly[i] >= self.model.anomaly_threshold,
                                                       anomaly[i] < self.model.anomaly_threshold):
                out.append(self._anomaly(node, gpu, ts, now, float(anomaly[i]), x[i]))
        return out

    def _episode(self, kind: str, node: str, gpu: int, above: bool, clear: bool, level: int = 1) -> bool:
        """Whether an episode starts (or escalates from an alert to a drain, ``level`` 2) at this scoring."""
        if kind == "hazard":
            needed = self.config.consecutive if level == 2 else self.config.alert_consecutive
        else:
            needed = self.config.anomaly_consecutive
        key = (kind, node, gpu)
        if not above:
            self.streak.pop(key, None)
            if clear:
                self.open.pop(key, None)
            return False
        self.streak[key] = self.streak.get(key, 0) + 1
        if self.streak[key] < needed or self.open.get(key, 0) >= level:
            return False
        self.open[key] = level
        return True

    def _evidence(self, row: np.ndarray) -> dict[str, EvidenceValue]:
        evidence: dict[str, EvidenceValue] = {"model": self.name}
        evidence.update({f"feature.{k}": v for k, v in self.model.unusual(row).items()})
        return evidence

    def _hazard(self, node: str, gpu: int, ts: float, now: float, p: float, row: np.ndarray,
                physical: bool) -> Finding:
        """A predicted failure: checkpoint and drain when the GPU shows a physical precursor of its own; an alert
        (for a person to look at) when only the model's score says so."""
        hours = self.model.horizon_s / 3600.0
        evidence = self._evidence(row) | {"probability": round(p, 4), "threshold": round(self.threshold, 4),
                                          "horizon_s": self.model.horizon_s, "physical_evidence": physical}
        summary = f"GPU {gpu}: P(failure within {hours:g} h) = {p:.2f} (threshold {self.threshold:.2f})"
        if not physical:
            summary += "; no physical precursor of its own: alert only"
        return make_finding("hazard-model", FindingClass.PREDICTED_FAILURE, node, now, ts,
                            Severity.CRITICAL if physical else Severity.WARNING,
                            Recommendation.CHECKPOINT_DRAIN if physical else Recommendation.ALERT,
                            min(max(p, 0.0), 1.0), summary, gpu, evidence)

    def _anomaly(self, node: str, gpu: int, ts: float, now: float, score: float, row: np.ndarray) -> Finding:
        evidence = self._evidence(row) | {"anomaly_score": round(score, 4),
                                          "threshold": round(self.model.anomaly_threshold, 4)}
        return make_finding("isolation-forest", FindingClass.ANOMALY, node, now, ts, Severity.WARNING,
                            Recommendation.ALERT, 0.5, f"GPU {gpu}: telemetry unlike any healthy GPU in training "
                            f"(score {score:.3f})", gpu, evidence)


def _features(windows: dict[str, NodeWindow], due: list[str]) -> list[tuple[str, np.ndarray]]:
    """Each due node's feature matrix (G, len(FEATURES)) before its baseline. Full windows of one width (the
    fleet's steady state) are stacked and go through ``gpu_features`` in one pass, each on its own times; the
    others (a node still filling its window, an odd GPU count) one by one."""
    groups: dict[tuple[int, int], list[str]] = {}
    out: list[tuple[str, np.ndarray]] = []
    for node in due:
        window = windows[node]
        if window.count >= window.size:
            groups.setdefault((window.size, window.gpus), []).append(node)
        else:
            out.append((node, gpu_features(window.series(), window.xid_age_s(window.last_ts, XID_AGE_CAP_S))))
    for group in groups.values():
        for start in range(0, len(group), STACK_NODES):
            nodes = group[start:start + STACK_NODES]
            stacked = [windows[n] for n in nodes]
            series = stack_series(stacked)
            ages = np.stack([w.xid_age_s(w.last_ts, XID_AGE_CAP_S) for w in stacked])
            feats = gpu_features(series, ages)  # (N, G, F)
            out.extend(zip(nodes, feats, strict=True))
    return out


def stack_series(windows: list[NodeWindow]) -> dict[str, np.ndarray]:
    """``NodeWindow.series()`` of full windows of one shape, stacked on a node axis after time: GPU fields and
    ``throttle`` (T, N, G), node fields (T, N)."""
    size = windows[0].size
    counts = np.array([w.count for w in windows])
    rows = (counts[:, None] + np.arange(size)) % size  # oldest first, per window
    pick = (np.arange(len(windows))[:, None], rows)
    gpu = np.stack([w.gpu for w in windows])[pick].astype(np.float64)  # (N, T, F, G)
    gpu += np.stack([w.base for w in windows])[:, None]
    node = np.stack([w.node for w in windows])[pick]  # (N, T, fields)
    throttle = np.stack([w.throttle for w in windows])[pick]  # (N, T, G)
    out = {name: gpu[:, :, i, :].transpose(1, 0, 2) for i, name in enumerate(GPU_FIELDS)}
    out.update({name: node[:, :, i].T for i, name in enumerate(NODE_FIELDS)})
    out["throttle"] = throttle.transpose(1, 0, 2)
    return out


def load_scorer(config: HazardConfig, verify_keys: list[bytes] | None = None) -> HazardScorer | None:
    """The configured model ready to score, or None when ``model`` is empty (rules only); with ``verify_keys``
    only a model whose description one of them signed."""
    if not config.model:
        return None
    directory = persistence.resolve(config.model, Path(config.models_dir))
    meta = persistence.metadata(directory)
    created = float(meta.get("created_ts", 0.0))
    name = shipped.NAME if shipped.is_shipped(directory) else directory.name
    return HazardScorer(persistence.load(directory, verify_keys), config, name, created)
