"""The policy: plan -> hysteresis -> guards -> breaker, as pure functions of a finding, its incident and facts.

``decide`` reads nothing and writes nothing: the controller reads the ``Facts`` once (inside the transaction that
holds the breaker's lock), and stores what comes back (the decision, the breaker's next state) together with the
outgoing command. Every rail that holds an action back is named in the judgement's ``held_back`` so the caller
counts it in ``sentinel_guard_blocks_total{guard=...}``: low_confidence and hysteresis (the plan drops to an
alert), the guards (dedup, in_flight, opt_out, cooldown, observe_only) and the breaker (the decision is recorded
as OBSERVE). Lemon nodes are named in the decision's reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from sentinel.config import PolicyConfig
from sentinel.events import ActionKind, Decision, Finding, FindingClass, Incident, Mode, Recommendation
from sentinel.policy import plans
from sentinel.policy.breaker import BreakerState, admission
from sentinel.policy.guards import GUARDS, Guard, GuardContext, Proposal


@dataclass(frozen=True)
class Facts:
    """What the policy knows of the world beyond the finding and its incident, read once per finding."""

    fleet_size: int
    prior_action: ActionKind | None  # the incident's last decision on the escalation chain
    last_executed_ts: float | None  # last disruptive action decided for execution on this node
    drained_by: str | None  # incident Sentinel holds the node drained for
    command_in_flight: str | None  # incident of a command on this node that is decided but not finished
    recent_incidents: int  # incidents on this node inside policy.lemon.window_s
    breaker: BreakerState
    held_out: int = 0  # nodes Sentinel holds out of service now (drained, or a drain under way)
    managed: bool | None = None  # the node is in the scheduler's stored list; None: no scheduler is driven


@dataclass(frozen=True)
class Judgement:
    decision: Decision | None  # None: nothing new is called for
    breaker: BreakerState | None  # the breaker's next state; None when unchanged
    held_back: tuple[str, ...] = ()  # rails that held an action back (sentinel_guard_blocks_total labels)


def decide(incident: Incident, finding: Finding, facts: Facts, config: PolicyConfig, now: float,
           guards: dict[str, Guard] | None = None) -> Judgement:
    """Judge ``finding`` within ``incident``. Only an action stronger than the incident's last decision yields a
    new decision, so repeated or redelivered findings never act twice (decision ids are ``<incident>:<action>``)."""
    guards = GUARDS if guards is None else guards
    notes: list[str] = []
    held: list[str] = []
    action = plans.propose(finding, config.min_confidence)
    if action is ActionKind.ALERT and finding.recommendation is Recommendation.CHECKPOINT_DRAIN:
        held.append("low_confidence")
        notes.append(f"confidence {finding.confidence:.2f} < policy.min_confidence {config.min_confidence:.2f}: "
                     "alert only")
    if action is ActionKind.NONE:
        return Judgement(None, None)
    if finding.kind is FindingClass.STRAGGLER and plans.is_disruptive(action):
        pays, note = straggler_pays(finding, config)
        notes.append(note)
        if not pays:
            held.append("straggler_cost")
            action = ActionKind.ALERT
    needed = config.hysteresis.min_findings
    if plans.is_disruptive(action) and not plans.is_fatal_plan(action) and len(incident.finding_ids) < needed:
        held.append("hysteresis")
        notes.append(f"waiting for the incident to persist: {len(incident.finding_ids)}/{needed} findings "
                     "(policy.hysteresis.min_findings)")
        action = ActionKind.ALERT
    if facts.prior_action is not None and plans.ACTION_RANK[facts.prior_action] >= plans.ACTION_RANK[action]:
        return Judgement(None, None)
    blocked: list[str] = []
    reasons: list[str] = []
    breaker: BreakerState | None = None
    if plans.is_disruptive(action):
        proposal = Proposal(incident.node, incident.id, action)
        ctx = GuardContext(config, now, facts.last_executed_ts, facts.drained_by, facts.command_in_flight)
        if facts.managed is False:  # closed while the list is empty: a name nobody listed is never acted on
            blocked.append("unmanaged_node")
            reasons.append(f"{incident.node} is not in the scheduler's node list (the drain watch stores it)")
        for name, guard in guards.items():
            reason = guard(proposal, ctx)
            if reason:
                blocked.append(name)
                reasons.append(reason)
        if not blocked:
            verdict, breaker = admission(facts.breaker, incident.node, facts.fleet_size, now, config.breaker,
                                         in_service=facts.fleet_size - facts.held_out)
            if not verdict.allowed:
                blocked.append("breaker")
                reasons.append(verdict.reason)
    mode = Mode.OBSERVE if blocked else Mode.EXECUTE
    why = f"{finding.rule}: {finding.summary}" + "".join(f" | {n}" for n in [*notes, *_lemon(facts, config)])
    if reasons:
        why += " | not acting: " + "; ".join(reasons)
    return Judgement(_decision(incident, action, mode, why, blocked, now), breaker, (*held, *blocked))


def straggler_pays(finding: Finding, config: PolicyConfig) -> tuple[bool, str]:
    """Whether removing a confirmed straggler costs the job less than leaving it (``policy.straggler``), and why."""
    rule = config.straggler
    ratio = finding.evidence.get("ratio")
    if not rule.enabled or not isinstance(ratio, (int, float)) or not 0 < ratio < 1:
        return False, "straggler: alert only (policy.straggler.enabled = false, or no clock ratio in the evidence)"
    slow = (1.0 - float(ratio)) * rule.slow_horizon_s  # job time lost to slow steps if the GPU stays
    verdict = "remove it" if slow > rule.restart_s else "keep it, alert"
    return slow > rule.restart_s, (f"straggler cost: slow steps {1 - ratio:.0%} of the job for "
                                   f"{rule.slow_horizon_s / 3600:g} h = {slow:.0f} s of job time vs a restart of "
                                   f"{rule.restart_s:.0f} s: {verdict}")


def operator_request(incident: Incident, finding: Finding, facts: Facts, config: PolicyConfig,
                     now: float) -> Decision | None:
    """A GPU reset or reboot request for the operator queue after a fatal fault: recorded (OBSERVE), never
    executed. Its id ``<incident>:<request>`` makes a repeat a no-op in the store."""
    kind = plans.operator_request(finding)
    if kind is None:
        return None
    why = f"operator queue: {finding.summary}" + "".join(f" | {n}" for n in _lemon(facts, config))
    return _decision(incident, kind, Mode.OBSERVE, why, [], now)


def is_lemon(facts: Facts, config: PolicyConfig) -> bool:
    """Repeated incidents on one node (policy.lemon): noted in every decision; its drains are never undone by
    auto-resume."""
    return facts.recent_incidents >= config.lemon.min_incidents


def _lemon(facts: Facts, config: PolicyConfig) -> list[str]:
    if not is_lemon(facts, config):
        return []
    return [f"lemon: {facts.recent_incidents} incidents in {config.lemon.window_s / 86_400:.0f} d on this node"]


def _decision(incident: Incident, action: ActionKind, mode: Mode, why: str, blocked: list[str],
              now: float) -> Decision:
    return Decision(id=f"{incident.id}:{action.value}", incident_id=incident.id, node=incident.node, ts=now,
                    action=action, mode=mode, reason=why[:4096], blocked_by=blocked)
