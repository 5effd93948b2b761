"""Plans from class, severity and confidence; hysteresis both ways; lemon nodes; the operator queue."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sentinel.actuator.signing import CommandSigner, process_key
from sentinel.cli.main import main
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.controller.service import Controller
from sentinel.events import ActionKind, Finding, FindingClass, IncidentStatus, Mode, Recommendation, Severity
from sentinel.obs.metrics import Metrics
from sentinel.policy import plans
from sentinel.store.repository import Repository
from sentinel.transport.memory import MemoryTransport

DAY = 86_400.0


def finding(severity: Severity = Severity.CRITICAL, recommendation: Recommendation = Recommendation.CHECKPOINT_DRAIN,
            confidence: float = 0.9, kind: FindingClass = FindingClass.GPU_THERMAL, node: str = "gpu-1",
            ts: float = 1_767_225_600.0, n: int = 0, meaning: str = "") -> Finding:
    return Finding(id=f"f-{node}-{ts:.0f}-{n}", node=node, ts=ts, observed_ts=ts, kind=kind, rule="test",
                   severity=severity, recommendation=recommendation, confidence=confidence, summary="s",
                   evidence={"meaning": meaning} if meaning else {})


@pytest.mark.parametrize(("severity", "recommendation", "confidence", "action"), [
    (Severity.FATAL, Recommendation.DRAIN, 1.0, ActionKind.DRAIN_REQUEUE),
    (Severity.FATAL, Recommendation.CHECKPOINT_DRAIN, 0.1, ActionKind.DRAIN_REQUEUE),  # fatal never waits
    (Severity.CRITICAL, Recommendation.CHECKPOINT_DRAIN, 0.8, ActionKind.CHECKPOINT_DRAIN_REQUEUE),
    (Severity.CRITICAL, Recommendation.CHECKPOINT_DRAIN, 0.3, ActionKind.ALERT),  # weak prediction: alert only
    (Severity.WARNING, Recommendation.ALERT, 0.9, ActionKind.ALERT),
    (Severity.INFO, Recommendation.NONE, 0.9, ActionKind.NONE),
])
def test_the_plan_follows_severity_recommendation_and_confidence(
    severity: Severity, recommendation: Recommendation, confidence: float, action: ActionKind
) -> None:
    assert plans.propose(finding(severity, recommendation, confidence), min_confidence=0.5) is action


@pytest.mark.parametrize(("kind", "meaning", "expected"), [
    (FindingClass.GPU_LOST, "", ActionKind.REQUEST_REBOOT),
    (FindingClass.GPU_ECC, "", ActionKind.REQUEST_GPU_RESET),
    (FindingClass.GPU_XID, "GPU has fallen off the bus: reboot node", ActionKind.REQUEST_REBOOT),
    (FindingClass.GPU_XID, "double-bit ECC error: reset GPU or reboot node", ActionKind.REQUEST_GPU_RESET),
    (FindingClass.GPU_XID, "auxiliary power not connected: check mechanicals", None),
    (FindingClass.GPU_THERMAL, "", None),
])
def test_fatal_faults_put_the_catalogs_recovery_in_the_operator_queue(
    kind: FindingClass, meaning: str, expected: ActionKind | None
) -> None:
    f = finding(Severity.FATAL, Recommendation.DRAIN, kind=kind, meaning=meaning)
    assert plans.operator_request(f) is expected


@given(severity=st.sampled_from(Severity), recommendation=st.sampled_from(Recommendation),
       confidence=st.floats(0, 1), min_confidence=st.floats(0, 1), kind=st.sampled_from(FindingClass),
       meaning=st.sampled_from(["", "reset GPU", "reboot node"]))
def test_only_fatal_or_confident_findings_are_ever_disruptive(
    severity: Severity, recommendation: Recommendation, confidence: float, min_confidence: float,
    kind: FindingClass, meaning: str
) -> None:
    f = finding(severity, recommendation, confidence, kind=kind, meaning=meaning)
    action = plans.propose(f, min_confidence)
    if plans.is_disruptive(action):
        assert severity is Severity.FATAL or confidence >= min_confidence
        assert recommendation in (Recommendation.DRAIN, Recommendation.CHECKPOINT_DRAIN)
    if severity is Severity.FATAL:
        assert action is not ActionKind.CHECKPOINT_DRAIN_REQUEUE  # a dead GPU cannot checkpoint
    if plans.operator_request(f) is not None:
        assert severity is Severity.FATAL
    assert action in plans.ACTION_RANK


def controller(repo: Repository, clock: ManualClock, metrics: Metrics, **policy: object) -> Controller:
    config = from_mapping({"policy": {"mode": "act", "breaker": {"max_fraction": 1.0}, **policy}}).policy
    return Controller(MemoryTransport(1000), repo, config, metrics, clock, signer=CommandSigner(process_key()))


def test_a_prediction_waits_for_the_incident_to_persist_then_checkpoints(repo: Repository) -> None:
    clock, metrics = ManualClock(), Metrics()
    c = controller(repo, clock, metrics, hysteresis={"min_findings": 2})
    first = c.on_finding(finding(ts=clock.now(), n=1), clock.now())
    assert first is not None and first.action is ActionKind.ALERT and "1/2 findings" in first.reason
    assert metrics.registry.get_sample_value("sentinel_guard_blocks_total", {"guard": "hysteresis"}) == 1
    clock.advance(30)
    second = c.on_finding(finding(ts=clock.now(), n=2), clock.now())
    assert second is not None and second.action is ActionKind.CHECKPOINT_DRAIN_REQUEUE
    assert second.mode is Mode.EXECUTE and len(repo.table("commands")) == 1


def test_a_fatal_fault_drains_at_once_whatever_the_hysteresis(repo: Repository) -> None:
    clock = ManualClock()
    c = controller(repo, clock, Metrics(), hysteresis={"min_findings": 5})
    decision = c.on_finding(finding(Severity.FATAL, Recommendation.DRAIN, kind=FindingClass.GPU_LOST,
                                    ts=clock.now()), clock.now())
    assert decision is not None and decision.action is ActionKind.DRAIN_REQUEUE and decision.mode is Mode.EXECUTE
    [request] = repo.operator_queue()
    assert request["action"] == "request_reboot" and request["mode"] == "observe"
    assert repo.table("commands")[0]["action"] == "drain_requeue"  # the request itself is never a command


def test_a_weak_prediction_is_counted_and_only_alerts(repo: Repository) -> None:
    clock, metrics = ManualClock(), Metrics()
    decision = controller(repo, clock, metrics).on_finding(finding(confidence=0.2, ts=clock.now()), clock.now())
    assert decision is not None and decision.action is ActionKind.ALERT
    assert metrics.registry.get_sample_value("sentinel_guard_blocks_total", {"guard": "low_confidence"}) == 1
    assert repo.table("commands") == []


def test_an_incident_clears_only_after_the_quiet_period(repo: Repository) -> None:
    clock = ManualClock()
    c = controller(repo, clock, Metrics(), mode="observe", hysteresis={"quiet_s": 600})
    c.on_finding(finding(Severity.WARNING, Recommendation.ALERT, ts=clock.now()), clock.now())
    clock.advance(540)
    c.step()
    assert repo.open_incident("gpu-1") is not None
    clock.advance(120)  # 660 s quiet
    c.step()
    assert repo.open_incident("gpu-1") is None
    assert repo.incidents()[0]["status"] == IncidentStatus.RESOLVED.value


def test_a_mitigated_incident_stays_until_an_operator_acts(repo: Repository) -> None:
    clock = ManualClock()
    c = controller(repo, clock, Metrics(), hysteresis={"quiet_s": 60})
    c.on_finding(finding(Severity.FATAL, Recommendation.DRAIN, ts=clock.now()), clock.now())
    incident = repo.open_incident("gpu-1")
    assert incident is not None
    repo.save_incident(incident.__class__(**{**{f: getattr(incident, f) for f in incident.__struct_fields__},
                                              "status": IncidentStatus.MITIGATED}))
    clock.advance(3600)
    c.step()
    assert repo.open_incident("gpu-1") is not None


def test_two_incidents_in_fourteen_days_make_a_lemon(repo: Repository) -> None:
    clock, metrics = ManualClock(), Metrics()
    c = controller(repo, clock, metrics, mode="observe", hysteresis={"quiet_s": 600})
    c.on_finding(finding(Severity.WARNING, Recommendation.ALERT, ts=clock.now()), clock.now())
    c.on_finding(finding(Severity.WARNING, Recommendation.ALERT, node="gpu-2", ts=clock.now()), clock.now())
    clock.advance(3 * DAY)
    c.step()  # both quiet: resolved
    second = c.on_finding(finding(Severity.WARNING, Recommendation.ALERT, ts=clock.now()), clock.now())
    assert second is not None and "lemon: 2 incidents in 14 d" in second.reason
    clock.advance(60)
    c.step()
    assert metrics.registry.get_sample_value("sentinel_lemon_nodes") == 1
    assert repo.incident_counts(clock.now() - 14 * DAY) == {"gpu-1": 2, "gpu-2": 1}
    assert repo.incident_counts(clock.now() + 1) == {}  # outside the window: forgotten


def test_nodes_and_requests_verbs_show_lemons_and_the_operator_queue(repo: Repository, sqlite_url: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import time

    clock = ManualClock(start=time.time())
    c = controller(repo, clock, Metrics(), hysteresis={"quiet_s": 600})
    c.on_finding(finding(Severity.FATAL, Recommendation.DRAIN, kind=FindingClass.GPU_ECC, ts=clock.now()),
                 clock.now())
    c.on_finding(finding(Severity.WARNING, Recommendation.ALERT, node="gpu-2", ts=clock.now()), clock.now())
    clock.advance(3600)
    c.step()
    c.on_finding(finding(Severity.WARNING, Recommendation.ALERT, node="gpu-2", ts=clock.now()), clock.now())
    assert main(["nodes", "--db", sqlite_url, "-o", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["gpu-2"]["lemon"] is True and rows["gpu-2"]["recent_incidents"] == 2
    assert rows["gpu-1"]["lemon"] is False
    assert main(["requests", "--db", sqlite_url, "-o", "json"]) == 0
    [request] = json.loads(capsys.readouterr().out)
    assert request["node"] == "gpu-1" and request["action"] == "request_gpu_reset"
    assert main(["nodes", "--db", sqlite_url]) == 0
    assert "LEMON" in capsys.readouterr().out
