"""The policy: rule (plan) -> guards -> breaker, producing one Decision per incident and action level."""

from __future__ import annotations

from sentinel.config import PolicyConfig
from sentinel.events import ActionKind, Decision, Finding, Incident, Mode
from sentinel.metrics import Metrics
from sentinel.policy import plans
from sentinel.policy.breaker import Breaker
from sentinel.policy.guards import GUARDS, Guard, GuardContext, Proposal
from sentinel.store.repository import Repository


class PolicyEngine:
    def __init__(
        self,
        repo: Repository,
        config: PolicyConfig,
        breaker: Breaker,
        metrics: Metrics,
        guards: dict[str, Guard] | None = None,
    ) -> None:
        self.repo = repo
        self.config = config
        self.breaker = breaker
        self.metrics = metrics
        self.guards = GUARDS if guards is None else guards

    def decide(self, incident: Incident, finding: Finding, fleet_size: int, now: float) -> Decision | None:
        """Decide on ``finding`` within ``incident``; ``None`` when nothing new is called for.

        Only an action stronger than the incident's last decision yields a new decision, so repeated or
        redelivered findings never act twice (decision ids are ``<incident>:<action>``).
        """
        action = plans.propose(finding.recommendation)
        if action is ActionKind.NONE:
            return None
        prior = self.repo.last_decision_action(incident.id)
        if prior is not None and plans.ACTION_RANK[prior] >= plans.ACTION_RANK[action]:
            return None
        blocked: list[str] = []
        reasons: list[str] = []
        if plans.is_disruptive(action):
            proposal = Proposal(incident.node, incident.id, action)
            ctx = GuardContext(
                self.config, now, self.repo.last_executed_ts(incident.node), self.repo.drained_by(incident.node)
            )
            for name, guard in self.guards.items():
                reason = guard(proposal, ctx)
                if reason:
                    blocked.append(name)
                    reasons.append(reason)
            if not blocked:
                verdict = self.breaker.admit(incident.node, fleet_size, now)
                if not verdict.allowed:
                    blocked.append("breaker")
                    reasons.append(verdict.reason)
        for name in blocked:
            self.metrics.guard_blocks.labels(name).inc()
        mode = Mode.OBSERVE if blocked else Mode.EXECUTE
        why = f"{finding.rule}: {finding.summary}"
        if reasons:
            why += " | not acting: " + "; ".join(reasons)
        decision = Decision(
            id=f"{incident.id}:{action.value}",
            incident_id=incident.id,
            node=incident.node,
            ts=now,
            action=action,
            mode=mode,
            reason=why[:4096],
            blocked_by=blocked,
        )
        self.metrics.decisions.labels(action.value, mode.value).inc()
        return decision
