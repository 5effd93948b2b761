"""One incident per node episode: a finding opens it or folds into the open one (pure, no I/O)."""

from __future__ import annotations

import msgspec

from sentinel.events import SEVERITY_RANK, Finding, Incident, IncidentStatus


def merge(finding: Finding, incident: Incident | None, now: float) -> Incident:
    """``incident`` with ``finding`` folded in, or a new incident when the node has none open: the worse severity
    names the incident's kind and summary; a redelivered finding is the same evidence and does not count twice
    toward ``policy.min_findings``."""
    if incident is None:
        return Incident(
            id=f"inc-{finding.node}-{int(finding.observed_ts)}",
            node=finding.node,
            opened_ts=finding.observed_ts,
            updated_ts=now,
            status=IncidentStatus.OPEN,
            severity=finding.severity,
            kind=finding.kind,
            summary=finding.summary,
            finding_ids=[finding.id],
        )
    worse = SEVERITY_RANK[finding.severity] > SEVERITY_RANK[incident.severity]
    return msgspec.structs.replace(
        incident,
        updated_ts=now,
        severity=finding.severity if worse else incident.severity,
        kind=finding.kind if worse else incident.kind,
        summary=finding.summary if worse else incident.summary,
        finding_ids=incident.finding_ids if finding.id in incident.finding_ids else [*incident.finding_ids,
                                                                                     finding.id],
    )
