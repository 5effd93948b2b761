"""How every rule and model builds its Finding: one id scheme, so a replayed message yields the same id."""

from __future__ import annotations

from sentinel.events import EvidenceValue, Finding, FindingClass, Recommendation, Severity


def make_finding(
    rule: str,
    kind: FindingClass,
    node: str,
    now: float,
    observed: float,
    severity: Severity,
    recommendation: Recommendation,
    confidence: float,
    summary: str,
    gpu: int | None,
    evidence: dict[str, EvidenceValue],
) -> Finding:
    """A finding whose id is derived from the rule, the node, the GPU and when the evidence was observed."""
    gpu_part = "node" if gpu is None else f"gpu{gpu}"
    return Finding(
        id=f"{rule}:{node}:{gpu_part}:{int(observed * 1000)}",
        node=node,
        ts=now,
        observed_ts=observed,
        kind=kind,
        rule=rule,
        severity=severity,
        recommendation=recommendation,
        confidence=confidence,
        summary=summary,
        gpu_index=gpu,
        evidence=evidence,
    )
