"""Host anomalies live: each node's host metrics against its own history (``[detector.host_anomaly]``).

Per node, samples become one row per ``interval_s`` (:mod:`sentinel.detector.host_rows`). After ``warmup_s`` of
rows the node gets its own :class:`models.server_anomaly.ServerAnomalyModel`, refitted every ``refit_s`` on the
last ``history_s`` of rows, with the threshold the benchmark validates: the false-alarm budget
(``budget_per_day``) spent on out-of-sample calibration scores. Each metric is first scaled by its min-max range
in the node's history (as SMD and ASD are published), with a floor so that a metric that never moved (disk use)
does not make a hair's move look huge. A row whose score crosses the threshold, at most one per
``refractory_s``, is a finding: kind ``anomaly``, rule ``host-anomaly``, severity warning, recommendation
alert — never a drain on its own — with the metrics that moved most, their value and their expected value.

Replayed samples (a partition handed over) rebuild history like live ones; the caller drops their findings.
State is saved per node (:mod:`sentinel.detector.host_anomaly_state`) at every fit and every ``SAVE_EVERY_ROWS``
rows, and read back the first time a node is seen after a restart; scoring then resumes from that node's next
row. With a state folder, saved history rows live only in the file (read back to fit and to save), so memory
holds at most ``SAVE_EVERY_ROWS`` rows per node, not ``history_s`` of them (80 KB per node at the defaults).
Nodes are independent: one node's bad rows cannot fail another's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from sentinel.config.detector import HostAnomalyConfig
from sentinel.detector.findings import make_finding
from sentinel.detector.host_anomaly_state import HostFit, HostStateFiles
from sentinel.detector.host_rows import HOST_METRICS, HOST_READING_METRICS, RowBuilder, RowRing
from sentinel.detector.sample_view import SampleView
from sentinel.events import EvidenceValue, Finding, FindingClass, Recommendation, Severity
from sentinel_models.server_alerts import budget_threshold
from sentinel_models.server_anomaly import EwmaState, ServerAnomalyModel, calibration_scores

log = logging.getLogger(__name__)
RULE = "host-anomaly"
SAVE_EVERY_ROWS = 30  # rows in memory between saves of a node (with a state folder): 30 x 7 float32
RETRY_ROWS = 60
MIN_PRESENT = 0.9  # a metric enters the model when at least this share of the history rows has it
# smallest min-max span per metric, in its own unit: below it a metric counts as constant in its history
SPAN_FLOOR = np.array([0.5, 0.5, 2.0, 1.0, 1.0, 1e6, 1e6])
SPAN_FLOOR_SHARE = 0.05  # ... and never below this share of its median level


@dataclass
class NodeHost:
    builder: RowBuilder
    history: RowRing  # rows not in the node's state file yet (every row when there is no state folder)
    saved_rows: int = 0  # rows in the node's state file: read back only to fit and to save
    fit: HostFit | None = None
    ewma: EwmaState | None = None
    above: bool = False
    last_alert_ts: float = float("-inf")
    last_row_ts: float = float("-inf")
    unsaved: int = 0
    tried_ts: float = float("-inf")  # the last fit attempt (one that fails is retried RETRY_ROWS rows later)


@dataclass
class HostAnomaly:
    config: HostAnomalyConfig
    files: HostStateFiles | None = None
    nodes: dict[str, NodeHost] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: HostAnomalyConfig) -> HostAnomaly:
        return cls(config, HostStateFiles(config.state_dir, config.interval_s) if config.state_dir else None)

    def observe(self, sample: SampleView, now: float) -> list[Finding]:
        """Take one node's sample (time order per node); return a finding when a closed row is anomalous."""
        node = self.nodes.get(sample.node) or self._start(sample.node)
        closed = node.builder.add(sample)
        if closed is None:
            return []
        try:
            return self._row(sample.node, node, *closed, now)
        except (ValueError, np.linalg.LinAlgError) as exc:  # one node's odd history must not stop the detector
            log.warning("host anomaly: %s skipped a row: %s", sample.node, exc)
            return []

    def _start(self, name: str) -> NodeHost:
        capacity = max(2, round(self.config.history_s / self.config.interval_s))
        node = NodeHost(RowBuilder(self.config.interval_s), RowRing(capacity))
        saved = self.files.load(name) if self.files is not None else None
        if saved is not None:
            node.saved_rows = len(saved.rows)  # they stay on disk: a fleet's histories would not fit in memory
            node.fit, node.last_alert_ts, node.last_row_ts = saved.fit, saved.last_alert_ts, saved.last_row_ts
            log.info("host anomaly: %s resumed with %d rows, %s", name, node.saved_rows,
                     "fitted" if node.fit else "not fitted yet")
        self.nodes[name] = node
        return node

    def _row(self, name: str, node: NodeHost, ts: float, row: np.ndarray, now: float) -> list[Finding]:
        if not np.isfinite(row[:HOST_READING_METRICS]).any():  # no host collector on this node: nothing to learn
            return []
        if ts <= node.last_row_ts:  # already in the saved history: replayed to a restarted detector
            return []
        node.history.append(row)
        node.last_row_ts = ts
        node.unsaved += 1
        cfg = self.config
        found: list[Finding] = []
        due = (ts - node.fit.fitted_ts >= cfg.refit_s if node.fit is not None
               else self.kept(name) * cfg.interval_s >= cfg.warmup_s)
        if due and ts - node.tried_ts >= RETRY_ROWS * cfg.interval_s:
            node.tried_ts = ts
            fitted = self._fit(self.rows(name), ts)
            if fitted is not None:
                node.fit, node.ewma = fitted, fitted.model.end_state  # this row was in the fit: score from the next
                self._save(name, node)
        elif node.fit is not None:
            found = self._score(name, node, ts, row, now)
        if node.unsaved >= SAVE_EVERY_ROWS:
            self._save(name, node)
        return found

    def _fit(self, rows: np.ndarray, ts: float) -> HostFit | None:
        metrics = [j for j in range(rows.shape[1]) if np.isfinite(rows[:, j]).mean() >= MIN_PRESENT]
        x = rows[:, metrics]
        x = x[np.isfinite(x).all(axis=1)]
        if not metrics or len(x) < 60:
            return None
        low = x.min(axis=0)
        span = np.maximum.reduce([x.max(axis=0) - low, SPAN_FLOOR[metrics],
                                  SPAN_FLOOR_SHARE * np.abs(np.median(x, axis=0))])
        scaled = (x - low) / span
        names = [HOST_METRICS[j] for j in metrics]
        model = ServerAnomalyModel.fit(scaled, names)
        refractory = int(np.ceil(self.config.refractory_s / self.config.interval_s))
        threshold = budget_threshold(calibration_scores(scaled, names), self.config.interval_s,
                                     self.config.budget_per_day, refractory)
        return HostFit(tuple(metrics), low, span, model, threshold, ts)

    def _score(self, name: str, node: NodeHost, ts: float, row: np.ndarray, now: float) -> list[Finding]:
        fit = node.fit
        assert fit is not None
        raw = row[list(fit.metrics)]
        if not np.isfinite(raw).all():
            node.ewma, node.above = None, False  # a gap: the next complete row starts a fresh forecast
            return []
        scaled = ((raw - fit.low) / fit.span)[None, :]
        state = node.ewma if node.ewma is not None else fit.model.cold_start(scaled[0])
        scores, node.ewma = fit.model.score(scaled, state)
        score = float(scores.combined[0])
        exceed = score > fit.threshold
        onset = exceed and not node.above and ts - node.last_alert_ts >= self.config.refractory_s
        node.above = exceed
        if not onset:
            return []
        node.last_alert_ts = ts
        top = fit.model.explain(scaled, scores, 0, self.config.evidence_top)
        evidence: dict[str, EvidenceValue] = {"score": round(score, 3), "threshold": round(fit.threshold, 3),
                                              "fitted_ts": fit.fitted_ts, "interval_s": self.config.interval_s}
        parts = []
        for rank, c in enumerate(top, 1):
            j = fit.model.columns.index(c.metric)
            value, expected = float(raw[j]), float(c.expected * fit.span[j] + fit.low[j])
            evidence |= {f"metric{rank}": c.metric, f"metric{rank}_value": round(value, 3),
                         f"metric{rank}_expected": round(expected, 3), f"metric{rank}_score": round(c.score, 2)}
            parts.append(f"{c.metric} {value:.3g} (expected {expected:.3g})")
        self._save(name, node)
        return [make_finding(RULE, FindingClass.ANOMALY, name, now, ts, Severity.WARNING, Recommendation.ALERT,
                             round(min(0.95, 1 - fit.threshold / (2 * score)), 3) if score > 0 else 0.5,
                             "host metrics broke from this node's own history: " + ", ".join(parts), None,
                             evidence)]

    def kept(self, name: str) -> int:
        """How many history rows the node has (in its state file and in memory)."""
        node = self.nodes[name]
        return min(node.saved_rows + len(node.history), node.history.capacity)

    def rows(self, name: str) -> np.ndarray:
        """The node's history rows, oldest first: those of its state file, then those in memory."""
        node = self.nodes[name]
        if self.files is None or not node.saved_rows:
            return node.history.rows()
        saved = self.files.load(name)
        on_disk = saved.rows if saved is not None else np.zeros((0, node.history.width))
        return np.concatenate([on_disk, node.history.rows()])[-node.history.capacity:]

    def _save(self, name: str, node: NodeHost) -> None:
        node.unsaved = 0
        if self.files is None:
            return
        try:
            rows = self.rows(name)
            self.files.save(name, rows, node.fit, node.last_alert_ts, node.last_row_ts)
        except OSError as exc:  # a full or read-only disk costs the restart its warm start, not detection
            log.warning("host anomaly: cannot save %s: %s", name, exc)
            return
        node.saved_rows, node.history = len(rows), RowRing(node.history.capacity)  # memory: only what is new
