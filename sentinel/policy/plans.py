"""From an incident's severity and the evidence's recommendation to the action the policy proposes."""

from __future__ import annotations

from sentinel.events import ActionKind, Recommendation

ACTION_RANK = {
    ActionKind.NONE: 0,
    ActionKind.ALERT: 1,
    ActionKind.CHECKPOINT_DRAIN_REQUEUE: 2,
    ActionKind.DRAIN_REQUEUE: 3,
}

_BY_RECOMMENDATION = {
    Recommendation.NONE: ActionKind.NONE,
    Recommendation.ALERT: ActionKind.ALERT,
    # A failure is predicted: the job can still save its state, so checkpoint before moving it.
    Recommendation.CHECKPOINT_DRAIN: ActionKind.CHECKPOINT_DRAIN_REQUEUE,
    # The hardware already failed: the job cannot checkpoint on a dead GPU; move it now.
    Recommendation.DRAIN: ActionKind.DRAIN_REQUEUE,
}


def propose(recommendation: Recommendation) -> ActionKind:
    return _BY_RECOMMENDATION[recommendation]


def is_disruptive(action: ActionKind) -> bool:
    """Actions that take a node out of the pool: these pass the guards and the breaker."""
    return action in (ActionKind.CHECKPOINT_DRAIN_REQUEUE, ActionKind.DRAIN_REQUEUE)
