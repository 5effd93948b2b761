"""Risk forecast: which nodes Sentinel expects to lose in the next H hours, and how many GPUs that is.

A node's P(failure within H) comes from a ``FailureModel``. Until the hazard model (issue 6) is wired in, the
default is ``FindingsRisk``: the confidence of the node's most confident actionable finding in the last
``lookback_s`` (findings that recommend nothing are ignored). That is a coarse stand-in: a finding's confidence
is how sure the rule is that something is wrong, which the detector's rules set close to the probability that
the node is about to be unusable, and it does not depend on H. A hazard model's P(failure within H) plugs in by
implementing ``FailureModel.p_fail``. Nodes Sentinel already drained are out of the healthy capacity: they are
listed after the nodes in service (with their evidence) but not counted as expected losses.
Expected losses are sums of probabilities (nodes) and of probability x healthy GPUs (GPUs): a failing node takes
all its GPUs out of service for a job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class FailureModel(Protocol):
    def p_fail(self, nodes: Sequence[str], horizon_s: float) -> dict[str, float]:
        """P(failure within ``horizon_s``) per node; nodes left out count as 0."""
        ...


@dataclass(frozen=True)
class NodeRisk:
    node: str
    p_fail: float
    gpus: int  # healthy GPUs that would be lost
    state: str = "in service"  # or "drained" (already out of the healthy capacity; listed, not counted)
    evidence: dict[str, Any] = field(default_factory=dict)  # the finding behind it: rule, severity, summary, ...


class FindingsRisk:
    """P(failure) per node = confidence of its most confident actionable recent finding (rows of
    ``sentinel.capacity.bins_store.risk_findings``)."""

    def __init__(self, findings: Sequence[dict[str, Any]]) -> None:
        self.by_node = {str(f["node"]): f for f in findings}

    def p_fail(self, nodes: Sequence[str], horizon_s: float) -> dict[str, float]:
        return {n: float(self.by_node[n]["confidence"]) for n in nodes if n in self.by_node}

    def evidence(self, node: str) -> dict[str, Any]:
        f = self.by_node.get(node)
        if f is None:
            return {}
        keys = ("rule", "severity", "summary", "ts", "gpu_index", "evidence", "open_incidents")
        return {k: f[k] for k in keys if k in f}


@dataclass(frozen=True)
class RiskForecast:
    horizon_s: float
    healthy_gpus: int
    healthy_nodes: int
    expected_nodes_lost: float
    expected_gpus_lost: float
    top: list[NodeRisk]
    source: str


def forecast_risk(nodes: Sequence[dict[str, Any]], model: FailureModel, horizon_s: float, top: int = 10,
                  source: str = "findings") -> RiskForecast:
    """``nodes``: rows of ``sentinel.capacity.bins_store.fleet_nodes`` (name, ok GPUs, drained_incident_id)."""
    healthy = {str(n["name"]): int(n["ok"]) for n in nodes if n.get("drained_incident_id") is None}
    drained = {str(n["name"]): int(n["ok"]) for n in nodes if n.get("drained_incident_id") is not None}
    probs = model.p_fail([*healthy, *drained], horizon_s)
    risks = [NodeRisk(n, min(max(p, 0.0), 1.0), healthy[n]) for n, p in probs.items() if p > 0 and n in healthy]
    out = [NodeRisk(n, min(max(p, 0.0), 1.0), drained[n], "drained") for n, p in probs.items()
           if p > 0 and n in drained]
    listed = sorted(risks + out, key=lambda r: (r.state != "in service", -r.p_fail, -r.gpus, r.node))
    explain = getattr(model, "evidence", None)
    top_risks = [NodeRisk(r.node, r.p_fail, r.gpus, r.state, explain(r.node) if explain else {})
                 for r in listed[:top]]
    return RiskForecast(
        horizon_s=horizon_s,
        healthy_gpus=sum(healthy.values()),
        healthy_nodes=len(healthy),
        expected_nodes_lost=sum(r.p_fail for r in risks),
        expected_gpus_lost=sum(r.p_fail * r.gpus for r in risks),
        top=top_risks,
        source=source,
    )
