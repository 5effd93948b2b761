"""The policy: plan -> hysteresis -> guards -> breaker, producing one Decision per incident and action level.

Every rail that holds an action back counts it in ``sentinel_guard_blocks_total{guard=...}``: low_confidence
and hysteresis (the plan drops to an alert), the guards (dedup, opt_out, cooldown, observe_only) and the
breaker (the decision is recorded as OBSERVE). Lemon nodes are named in the decision's reason.
"""

from __future__ import annotations

from sentinel.config import PolicyConfig
from sentinel.events import ActionKind, Decision, Finding, Incident, Mode, Recommendation
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
        notes: list[str] = []
        action = plans.propose(finding, self.config.min_confidence)
        if action is ActionKind.ALERT and finding.recommendation is Recommendation.CHECKPOINT_DRAIN:
            self.metrics.guard_blocks.labels("low_confidence").inc()
            notes.append(f"confidence {finding.confidence:.2f} < policy.min_confidence "
                         f"{self.config.min_confidence:.2f}: alert only")
        if action is ActionKind.NONE:
            return None
        needed = self.config.hysteresis.min_findings
        if plans.is_disruptive(action) and not plans.is_fatal_plan(action) and len(incident.finding_ids) < needed:
            self.metrics.guard_blocks.labels("hysteresis").inc()
            notes.append(f"waiting for the incident to persist: {len(incident.finding_ids)}/{needed} findings "
                         "(policy.hysteresis.min_findings)")
            action = ActionKind.ALERT
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
        why = f"{finding.rule}: {finding.summary}" + "".join(f" | {n}" for n in [*notes, *self._lemon(incident)])
        if reasons:
            why += " | not acting: " + "; ".join(reasons)
        return self._decision(incident, action, mode, why, blocked, now)

    def operator_request(self, incident: Incident, finding: Finding, now: float) -> Decision | None:
        """A GPU reset or reboot request for the operator queue after a fatal fault: recorded (OBSERVE), never
        executed. Its id ``<incident>:<request>`` makes a repeat a no-op in the store."""
        kind = plans.operator_request(finding)
        if kind is None:
            return None
        why = f"operator queue: {finding.summary}" + "".join(f" | {n}" for n in self._lemon(incident))
        return self._decision(incident, kind, Mode.OBSERVE, why, [], now)

    def _lemon(self, incident: Incident) -> list[str]:
        lemon = self.config.lemon
        count = self.repo.incident_counts(incident.opened_ts - lemon.window_s, incident.node).get(incident.node, 0)
        if count < lemon.min_incidents:
            return []
        return [f"lemon: {count} incidents in {lemon.window_s / 86_400:.0f} d on this node"]

    def _decision(self, incident: Incident, action: ActionKind, mode: Mode, why: str, blocked: list[str],
                  now: float) -> Decision:
        self.metrics.decisions.labels(action.value, mode.value).inc()
        return Decision(id=f"{incident.id}:{action.value}", incident_id=incident.id, node=incident.node, ts=now,
                        action=action, mode=mode, reason=why[:4096], blocked_by=blocked)
