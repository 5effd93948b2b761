"""Plans: from a finding's class, severity, recommendation and confidence to what the policy proposes.

- alert only: a warning, or a predicted failure whose confidence is below ``policy.min_confidence``;
- checkpoint, then drain and requeue: a predicted failure (the job can still save its state);
- drain and requeue at once: a fatal fault (the hardware already failed; a checkpoint would hang or be corrupt);
- operator queue: after a fatal fault, a GPU reset or node reboot request that a person carries out. Sentinel
  records these (mode OBSERVE) and never executes them.

The escalation chain (``ACTION_RANK``) only moves up within an incident; operator requests sit beside it.
"""

from __future__ import annotations

from sentinel.events import ActionKind, Finding, FindingClass, Recommendation, Severity

ACTION_RANK = {
    ActionKind.NONE: 0,
    ActionKind.ALERT: 1,
    ActionKind.CHECKPOINT_DRAIN_REQUEUE: 2,
    ActionKind.DRAIN_REQUEUE: 3,
}
CHAIN = tuple(ACTION_RANK)
DISRUPTIVE = (ActionKind.CHECKPOINT_DRAIN_REQUEUE, ActionKind.DRAIN_REQUEUE)  # they take a node out of the pool
OPERATOR_REQUESTS = (ActionKind.REQUEST_GPU_RESET, ActionKind.REQUEST_REBOOT)

_BY_RECOMMENDATION = {
    Recommendation.NONE: ActionKind.NONE,
    Recommendation.ALERT: ActionKind.ALERT,
    # A failure is predicted: the job can still save its state, so checkpoint before moving it.
    Recommendation.CHECKPOINT_DRAIN: ActionKind.CHECKPOINT_DRAIN_REQUEUE,
    # The hardware already failed: the job cannot checkpoint on a dead GPU; move it now.
    Recommendation.DRAIN: ActionKind.DRAIN_REQUEUE,
}


def propose(finding: Finding, min_confidence: float = 0.0) -> ActionKind:
    """The chain action for ``finding``: fatal faults drain at once; weak predictions only alert."""
    action = _BY_RECOMMENDATION[finding.recommendation]
    if not is_disruptive(action):
        return action
    if finding.severity is Severity.FATAL:
        return ActionKind.DRAIN_REQUEUE  # the fault already happened: a checkpoint would hang or be corrupt
    if finding.confidence < min_confidence:
        return ActionKind.ALERT
    return ActionKind.CHECKPOINT_DRAIN_REQUEUE  # anything short of fatal is a prediction: save the job first


def operator_request(finding: Finding) -> ActionKind | None:
    """What a person should do to the hardware after a fatal fault, if the evidence says; else None."""
    if finding.severity is not Severity.FATAL:
        return None
    if finding.kind is FindingClass.GPU_LOST:
        return ActionKind.REQUEST_REBOOT  # off the bus: only a node reboot brings it back
    if finding.kind is FindingClass.GPU_ECC:
        return ActionKind.REQUEST_GPU_RESET  # a reset activates the row remap / page retirement
    meaning = str(finding.evidence.get("meaning", "")).lower()  # the Xid catalog's recovery action
    if "reset gpu" in meaning:
        return ActionKind.REQUEST_GPU_RESET
    if "reboot" in meaning:
        return ActionKind.REQUEST_REBOOT
    return None


def is_disruptive(action: ActionKind) -> bool:
    """Actions that take a node out of the pool: these pass the guards and the breaker."""
    return action in DISRUPTIVE


def is_fatal_plan(action: ActionKind) -> bool:
    """Immediate drains skip the hysteresis: the fault already happened, waiting only loses work."""
    return action is ActionKind.DRAIN_REQUEUE
