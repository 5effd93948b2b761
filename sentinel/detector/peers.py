"""Peer comparison across nodes, in the spirit of Minder (NSDI'25): the nodes of one data-parallel job do the
same work in lock-step, so a node whose metrics drift from its peers' median is suspect even when no rule
names what is wrong.

Every ``interval_s`` of sample time, for each job with at least ``MIN_PEERS`` reporting nodes, each node's
vector (mean GPU temperature, power, utilisation and SM clock over its last samples) is compared with the
job's median, metric by metric, in units of the peers' spread (1.4826 × median absolute deviation, with a floor
per metric so a very uniform job does not turn noise into huge distances). A node's distance is its largest
such z; it is smoothed (EWMA) and a node above ``Z_LIMIT`` for ``SUSTAIN`` evaluations in a row becomes an
``anomaly`` finding (alert only) naming the metric, its value and the peers' median.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sentinel.detector.findings import make_finding
from sentinel.detector.windows import NodeWindow
from sentinel.events import EvidenceValue, Finding, FindingClass, Recommendation, Severity

METRICS = ("temp_c", "power_w", "util_pct", "sm_clock_mhz")
FLOOR = np.array([1.0, 15.0, 3.0, 30.0])  # the smallest spread that counts (°C, W, %, MHz)
MIN_PEERS = 4
Z_LIMIT = 5.0
SUSTAIN = 3
ALPHA = 0.3  # EWMA weight of the newest distance
RECENT = 3  # samples averaged per node


@dataclass
class _NodeState:
    smoothed: float = 0.0
    streak: int = 0
    reported: bool = False


@dataclass
class PeerComparison:
    interval_s: float = 30.0
    last_eval: dict[str, float] = field(default_factory=dict)  # job -> sample time of its last evaluation
    nodes: dict[str, _NodeState] = field(default_factory=dict)
    members: dict[str, set[str]] = field(default_factory=dict)  # job -> nodes that last reported it
    node_jobs: dict[str, list[str]] = field(default_factory=dict)

    def observe(self, node: str, jobs: list[str]) -> None:
        """Record which jobs ``node`` runs now (from its newest sample)."""
        old = self.node_jobs.get(node, [])
        if old == jobs:
            return
        for job in old:
            self.members.get(job, set()).discard(node)
        for job in jobs:
            self.members.setdefault(job, set()).add(node)
        self.node_jobs[node] = list(jobs)

    def evaluate(self, windows: dict[str, NodeWindow], touched: list[str], now: float) -> list[Finding]:
        """Compare the peers of every job a touched node runs, at most once per ``interval_s`` per job."""
        out: list[Finding] = []
        jobs = {job for node in dict.fromkeys(touched) for job in self.node_jobs.get(node, [])}
        for job in sorted(jobs):
            members = sorted(n for n in self.members.get(job, ()) if n in windows)
            if len(members) < MIN_PEERS:
                continue
            newest = max(windows[n].last_ts for n in members)
            if newest - self.last_eval.get(job, -np.inf) < self.interval_s:
                continue
            self.last_eval[job] = newest
            out.extend(self._compare(job, members, windows, newest, now))
        return out

    def _compare(self, job: str, members: list[str], windows: dict[str, NodeWindow], newest: float,
                 now: float) -> list[Finding]:
        fresh = [n for n in members if newest - windows[n].last_ts <= 2 * self.interval_s]
        if len(fresh) < MIN_PEERS:
            return []
        vectors = np.array([node_vector(windows[n]) for n in fresh])
        ok = ~np.isnan(vectors).any(axis=1)
        if ok.sum() < MIN_PEERS:
            return []
        median = np.median(vectors[ok], axis=0)
        spread = np.maximum(1.4826 * np.median(np.abs(vectors[ok] - median), axis=0), FLOOR)
        z = (vectors - median) / spread
        out = []
        for i, node in enumerate(fresh):
            if not ok[i]:
                continue
            state = self.nodes.setdefault(node, _NodeState())
            worst = int(np.argmax(np.abs(z[i])))
            state.smoothed = ALPHA * float(abs(z[i, worst])) + (1 - ALPHA) * state.smoothed
            if state.smoothed < Z_LIMIT:
                state.streak = 0
                state.reported = state.reported and state.smoothed >= Z_LIMIT / 2
                continue
            state.streak += 1
            if state.streak < SUSTAIN or state.reported:
                continue
            state.reported = True
            evidence: dict[str, EvidenceValue] = {
                "job": job, "peers": len(fresh), "metric": METRICS[worst], "value": round(float(vectors[i, worst]), 2),
                "peer_median": round(float(median[worst]), 2), "z": round(float(z[i, worst]), 2),
                "smoothed_z": round(state.smoothed, 2)}
            out.append(make_finding(
                "peer-outlier", FindingClass.ANOMALY, node, now, windows[node].last_ts, Severity.WARNING,
                Recommendation.ALERT, min(1.0, state.smoothed / (2 * Z_LIMIT)),
                f"{METRICS[worst]} {vectors[i, worst]:.1f} vs {median[worst]:.1f} on the other nodes of job {job} "
                f"(z {z[i, worst]:+.1f}, {len(fresh)} peers)", None, evidence))
        return out


def node_vector(window: NodeWindow) -> np.ndarray:
    """Mean over the node's alive GPUs and its last RECENT samples of each of METRICS (NaN when none)."""
    series = window.series(RECENT)
    values = []
    for name in METRICS:
        data = series[name]
        values.append(float(np.nanmean(data)) if np.isfinite(data).any() else np.nan)
    return np.array(values)
