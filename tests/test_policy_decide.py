"""The policy as a pure function: a finding, its incident and the facts in; a decision and the breaker's next
state out. No store, no transport: every case is literals."""

from __future__ import annotations

from dataclasses import replace

from sentinel.config import PolicyConfig, from_mapping
from sentinel.events import ActionKind, Finding, FindingClass, Incident, IncidentStatus, Mode, Recommendation, Severity
from sentinel.policy.breaker import CLOSED, BreakerState
from sentinel.policy.engine import Facts, decide, operator_request

NOW = 1_767_225_600.0
FACTS = Facts(fleet_size=10, prior_action=None, last_executed_ts=None, drained_by=None, command_in_flight=None,
              recent_incidents=1, breaker=CLOSED)


def config(**policy: object) -> PolicyConfig:
    return from_mapping({"policy": {"mode": "act", **policy}}).policy


def finding(severity: Severity = Severity.FATAL, confidence: float = 1.0,
            recommendation: Recommendation = Recommendation.DRAIN) -> Finding:
    return Finding(id="f-1", node="gpu-1", ts=NOW, observed_ts=NOW, kind=FindingClass.GPU_XID, rule="xid-catalog",
                   severity=severity, recommendation=recommendation, confidence=confidence,
                   summary="Xid 79", evidence={"meaning": "GPU has fallen off the bus: reboot node"})


def incident(findings: int = 1) -> Incident:
    return Incident(id="inc-gpu-1-1", node="gpu-1", opened_ts=NOW, updated_ts=NOW, status=IncidentStatus.OPEN,
                    severity=Severity.FATAL, kind=FindingClass.GPU_XID, summary="Xid 79",
                    finding_ids=[f"f-{i}" for i in range(findings)])


def test_a_fatal_fault_is_executed_and_counted_in_the_breakers_next_state() -> None:
    judged = decide(incident(), finding(), FACTS, config(), NOW)
    assert judged.decision is not None and judged.decision.mode is Mode.EXECUTE
    assert judged.decision.action is ActionKind.DRAIN_REQUEUE and judged.decision.id == "inc-gpu-1-1:drain_requeue"
    assert judged.breaker is not None and judged.breaker.recent == [(NOW, "gpu-1")] and judged.held_back == ()


def test_nothing_new_when_the_incident_already_has_as_strong_a_decision() -> None:
    judged = decide(incident(), finding(), replace(FACTS, prior_action=ActionKind.DRAIN_REQUEUE), config(), NOW)
    assert judged.decision is None and judged.breaker is None


def test_a_prediction_waits_for_the_incident_to_persist() -> None:
    prediction = finding(Severity.CRITICAL, 0.9, Recommendation.CHECKPOINT_DRAIN)
    waiting = decide(incident(1), prediction, FACTS, config(hysteresis={"min_findings": 2}), NOW)
    assert waiting.decision is not None and waiting.decision.action is ActionKind.ALERT
    assert waiting.held_back == ("hysteresis",) and waiting.breaker is None
    persisted = decide(incident(2), prediction, replace(FACTS, prior_action=ActionKind.ALERT),
                       config(hysteresis={"min_findings": 2}), NOW)
    assert persisted.decision is not None and persisted.decision.action is ActionKind.CHECKPOINT_DRAIN_REQUEUE


def test_a_weak_prediction_only_alerts_and_says_why() -> None:
    judged = decide(incident(), finding(Severity.CRITICAL, 0.2, Recommendation.CHECKPOINT_DRAIN), FACTS, config(),
                    NOW)
    assert judged.decision is not None and judged.decision.action is ActionKind.ALERT
    assert judged.held_back == ("low_confidence",) and "min_confidence" in judged.decision.reason


def test_each_guard_turns_the_drain_into_an_observation_and_leaves_the_breaker_alone() -> None:
    cases = {
        "observe_only": (FACTS, config(mode="observe")),
        "dedup": (replace(FACTS, drained_by="inc-gpu-1-0"), config()),
        "in_flight": (replace(FACTS, command_in_flight="inc-gpu-1-0"), config()),
        "cooldown": (replace(FACTS, last_executed_ts=NOW - 60), config()),
        "opt_out": (FACTS, config(opt_out_nodes=["gpu-1"])),
    }
    for guard, (facts, cfg) in cases.items():
        judged = decide(incident(), finding(), facts, cfg, NOW)
        assert judged.decision is not None and judged.decision.mode is Mode.OBSERVE, guard
        assert judged.decision.blocked_by == [guard] and judged.held_back == (guard,), guard
        assert judged.breaker is None, guard


def test_a_command_under_way_for_the_same_incident_is_not_a_reason_to_hold_back() -> None:
    judged = decide(incident(), finding(), replace(FACTS, command_in_flight="inc-gpu-1-1"), config(), NOW)
    assert judged.decision is not None and judged.decision.mode is Mode.EXECUTE


def test_a_full_window_opens_the_breaker_in_the_next_state() -> None:
    full = BreakerState(False, "", 0.0, [(NOW - 10, "gpu-9")])
    judged = decide(incident(), finding(), replace(FACTS, breaker=full), config(breaker={"max_fraction": 0.1}),
                    NOW)
    assert judged.decision is not None and judged.decision.mode is Mode.OBSERVE
    assert judged.held_back == ("breaker",) and judged.breaker is not None and judged.breaker.is_open


def test_a_lemon_is_named_in_the_reason_and_the_operator_queue_gets_the_catalogs_recovery() -> None:
    facts = replace(FACTS, recent_incidents=3)
    judged = decide(incident(), finding(), facts, config(), NOW)
    assert judged.decision is not None and "lemon: 3 incidents" in judged.decision.reason
    request = operator_request(incident(), finding(), facts, config(), NOW)
    assert request is not None and request.action is ActionKind.REQUEST_REBOOT and request.mode is Mode.OBSERVE


def straggler(ratio: float) -> Finding:
    return Finding(id="f-s", node="gpu-1", ts=NOW, observed_ts=NOW, kind=FindingClass.STRAGGLER,
                   rule="straggler-confirmed", severity=Severity.CRITICAL,
                   recommendation=Recommendation.CHECKPOINT_DRAIN, confidence=0.8, summary="GPU 2 runs slow",
                   gpu_index=2, evidence={"ratio": ratio, "duration_s": 300.0})


def test_a_confirmed_straggler_is_removed_when_its_slow_steps_cost_more_than_a_restart_and_says_so() -> None:
    judged = decide(incident(), straggler(0.6), FACTS, config(), NOW)
    assert judged.decision is not None and judged.decision.action is ActionKind.CHECKPOINT_DRAIN_REQUEUE
    assert judged.decision.mode is Mode.EXECUTE and judged.breaker is not None
    # 40 % of the job for the default 1 h horizon = 1440 s against a 600 s restart
    assert "slow steps 40% of the job for 1 h = 1440 s of job time vs a restart of 600 s: remove it" in \
        judged.decision.reason


def test_a_straggler_that_costs_less_than_a_restart_only_alerts() -> None:
    judged = decide(incident(), straggler(0.7), FACTS, config(straggler={"restart_s": 1800.0}), NOW)
    assert judged.decision is not None and judged.decision.action is ActionKind.ALERT
    assert judged.held_back == ("straggler_cost",) and "keep it, alert" in judged.decision.reason
    off = decide(incident(), straggler(0.5), FACTS, config(straggler={"enabled": False}), NOW)
    assert off.decision is not None and off.decision.action is ActionKind.ALERT


def test_a_straggler_removal_passes_the_same_guards_and_breaker() -> None:
    full = BreakerState(False, "", 0.0, [(NOW - 10, "gpu-9")])
    judged = decide(incident(), straggler(0.5), replace(FACTS, breaker=full), config(breaker={"max_fraction": 0.1}),
                    NOW)
    assert judged.decision is not None and judged.decision.mode is Mode.OBSERVE and judged.held_back == ("breaker",)
    observed = decide(incident(), straggler(0.5), FACTS, config(mode="observe"), NOW)
    assert observed.decision is not None and observed.decision.mode is Mode.OBSERVE
