"""Effects exactly once across crashes: the controller's outbox, the actuator's journal, the breaker's lock.

Each test stages the failure that lost or doubled an effect before (issue 15): a controller that dies between
storing a command and publishing it, an actuator cut short mid-command (an uncaught client error, a kill), the
same envelope delivered again, two controllers judging at once. Real SQLite (and PostgreSQL where named) stores,
the real controller, policy and actuator service; the scheduler is the simulator's, wrapped to fail on cue.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from sentinel.actuator.sealed import Sealer
from sentinel.actuator.service import ActuatorService
from sentinel.actuator.signing import CommandSigner, CommandVerifier, MemoryNonces, process_key
from sentinel.actuator.steps import SchedulerActuator
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.controller.service import Controller
from sentinel.errors import TransportError
from sentinel.events import Finding, FindingClass, Recommendation, Severity
from sentinel.obs.metrics import Metrics
from sentinel.sim.scheduler import SimScheduler
from sentinel.store.engine import make_engine, upgrade
from sentinel.store.journal import StoreJournal
from sentinel.store.repository import Repository
from sentinel.transport import COMMANDS, FINDINGS, RESULTS
from sentinel.transport.memory import MemoryTransport

NODES = [f"gpu-node-{i:03d}" for i in range(1, 11)]


class FlakyScheduler(SimScheduler):
    """The simulator's scheduler that counts every effect and raises once, on cue, like an uncaught client error
    (a Kubernetes ApiException) or a process killed in the middle of that call."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(NODES, clock)
        self.calls: Counter[str] = Counter()
        self.fail_on: str | None = None

    def _effect(self, name: str) -> None:
        if self.fail_on == name:
            self.fail_on = None
            raise RuntimeError(f"{name}: connection reset by peer (injected)")
        self.calls[name] += 1

    def drain(self, node: str, reason: str) -> None:
        self._effect("drain")
        super().drain(node, reason)

    def requeue(self, job_id: str) -> None:
        self._effect("requeue")
        super().requeue(job_id)


def fatal(node: str, ts: float, n: int = 0) -> Finding:
    return Finding(id=f"f-{node}-{ts:.0f}-{n}", node=node, ts=ts, observed_ts=ts, kind=FindingClass.GPU_XID,
                   rule="xid-catalog", severity=Severity.FATAL, recommendation=Recommendation.DRAIN,
                   confidence=1.0, summary="Xid 79: GPU has fallen off the bus")


class Rig:
    def __init__(self, repo: Repository, **policy: Any) -> None:
        self.repo = repo
        self.clock = ManualClock()
        self.transport = MemoryTransport(10_000)
        self.config = from_mapping({"policy": {"mode": "act", "breaker": {"max_fraction": 0.5}, **policy}}).policy
        self.scheduler = FlakyScheduler(self.clock)
        for j in range(len(NODES)):
            self.scheduler.submit(f"job-{j}", 1)
        self.nonces = MemoryNonces()
        for node in NODES:
            repo.ensure_node(node, self.clock.now())
        self.controller = self.new_controller()
        self.actuator = self.new_actuator()

    def new_controller(self) -> Controller:
        return Controller(self.transport, self.repo, self.config, Metrics(), self.clock,
                          signer=CommandSigner(process_key()))

    def new_actuator(self, owner: str = "test/actuator", workers: int = 0) -> ActuatorService:
        verifier = CommandVerifier([process_key()], self.nonces, self.clock, 3600.0)
        return ActuatorService(self.transport, SchedulerActuator(self.scheduler, self.clock), Metrics(), self.clock,
                               verifier=verifier, journal=StoreJournal(self.repo.engine), owner=owner,
                               workers=workers)

    def find(self, node: str, n: int = 0) -> None:
        self.transport.publish(FINDINGS, node, Sealer(process_key(), Finding).seal(fatal(node, self.clock.now(), n)))

    def pump(self, rounds: int = 5) -> None:
        for _ in range(rounds):
            self.controller.step()
            self.actuator.step()

    def statuses(self) -> list[str]:
        return [c["status"] for c in self.repo.table("commands")]


def test_a_controller_that_dies_before_publishing_leaves_the_command_to_its_successor(repo: Repository) -> None:
    rig = Rig(repo)
    real = rig.transport.publish

    def broker_gone(topic: str, key: str | None, value: bytes) -> None:
        if topic == COMMANDS:
            raise TransportError("broker unreachable (injected)")
        real(topic, key, value)

    rig.transport.publish = broker_gone  # type: ignore[method-assign]
    rig.find("gpu-node-003")
    with pytest.raises(TransportError):
        rig.controller.step()
    assert rig.statuses() == ["pending"] and rig.transport.pending(FINDINGS) == 0  # stored, then committed
    rig.transport.publish = real  # type: ignore[method-assign]
    rig.controller = rig.new_controller()  # the first one is gone: its memory with it
    rig.pump()
    assert (rig.scheduler.drain_reason("gpu-node-003") or "").startswith("sentinel: ")
    assert rig.statuses() == ["done"] and rig.scheduler.calls["drain"] == 1


def test_a_command_cut_short_resumes_at_its_next_step_and_no_step_runs_twice(repo: Repository) -> None:
    rig = Rig(repo)
    rig.scheduler.fail_on = "requeue"  # drained, then the client blew up before the job was requeued
    rig.find("gpu-node-004")
    rig.pump()
    assert rig.scheduler.drain_reason("gpu-node-004") is not None and rig.scheduler.jobs_on("gpu-node-004")
    assert rig.actuator.metrics.registry.get_sample_value("sentinel_actuator_errors_total",
                                                          {"error": "RuntimeError"}) == 1
    assert rig.statuses() == ["pending"]
    rig.clock.advance(rig.config.command_resend_s + 1)  # no final result: the outbox sends it again
    rig.pump()
    assert rig.scheduler.jobs_on("gpu-node-004") == []
    assert rig.scheduler.calls == Counter({"drain": 1, "requeue": 1})
    assert rig.statuses() == ["done"]
    assert rig.actuator.metrics.registry.get_sample_value("sentinel_commands_resumed_total") == 1


def test_the_same_envelope_again_resumes_an_unfinished_command_and_is_refused_once_it_finished(
        repo: Repository) -> None:
    rig = Rig(repo)
    rig.find("gpu-node-005")
    rig.controller.step()
    [envelope] = [m.value for m in rig.transport.consumer("spy", [COMMANDS]).poll(10, 0.0)]
    rig.scheduler.fail_on = "drain"
    rig.actuator.step()  # interrupted before anything changed
    rig.transport.publish(COMMANDS, "gpu-node-005", envelope)  # a redelivery: the same nonce
    rig.actuator.step()
    assert rig.scheduler.drain_reason("gpu-node-005") is not None and rig.scheduler.calls["drain"] == 1
    rig.transport.publish(COMMANDS, "gpu-node-005", envelope)  # now a replay of a finished command
    rig.actuator.step()
    assert rig.actuator.metrics.registry.get_sample_value("sentinel_commands_rejected_total",
                                                          {"reason": "replayed"}) == 1
    assert rig.scheduler.calls == Counter({"drain": 1, "requeue": 1})


def test_a_finished_command_sent_again_only_repeats_its_results(repo: Repository) -> None:
    rig = Rig(repo)
    rig.find("gpu-node-006")
    rig.controller.step()
    rig.actuator.step()
    lost = rig.controller.consumer.poll(100, 0.0)  # the results are lost: the controller never handles them
    assert lost and {m.topic for m in lost} == {RESULTS}
    rig.controller.consumer.commit()
    assert rig.statuses() == ["pending"]
    rig.clock.advance(rig.config.command_resend_s + 1)
    rig.pump()
    assert rig.statuses() == ["done"]
    assert rig.scheduler.calls == Counter({"drain": 1, "requeue": 1})


def test_a_restarted_actuator_resumes_its_unfinished_commands_without_being_asked(repo: Repository) -> None:
    rig = Rig(repo)
    rig.scheduler.fail_on = "requeue"
    rig.find("gpu-node-007")
    rig.pump(1)
    rig.actuator = rig.new_actuator()  # the same actuator (owner) after a restart: its lease is its own
    rig.actuator.step()
    assert rig.scheduler.jobs_on("gpu-node-007") == [] and rig.scheduler.calls["requeue"] == 1


def test_a_command_another_actuator_holds_is_left_to_it(repo: Repository) -> None:
    rig = Rig(repo)
    rig.scheduler.fail_on = "requeue"
    rig.find("gpu-node-008")
    rig.pump(1)
    journal = StoreJournal(repo.engine)
    [(command_id, _)] = journal.unfinished(rig.clock.now())
    assert journal.claim(command_id, "other-host/actuator", rig.clock.now(), 900.0)
    rig.actuator._resume_ts = float("-inf")  # look at the journal now
    rig.actuator.step()  # the failing one released its lease; the other took it: hands off
    assert rig.scheduler.calls["requeue"] == 0
    rig.clock.advance(901)  # the other died holding it: the lease runs out
    rig.actuator._resume_ts = float("-inf")
    rig.actuator.step()
    assert rig.scheduler.calls["requeue"] == 1


def test_a_second_incident_on_a_node_with_a_drain_under_way_is_not_drained_again(repo: Repository) -> None:
    rig = Rig(repo)
    rig.find("gpu-node-009")
    rig.controller.step()  # command in the outbox and sent, no result yet
    rig.repo.resolve_quiet_incidents(rig.clock.now() + 1, rig.clock.now())  # as a second controller would see it
    rig.clock.advance(5)
    rig.find("gpu-node-009", n=1)
    rig.controller.step()
    drains = [d for d in repo.table("decisions") if d["action"] == "drain_requeue"]
    assert [d["mode"] for d in drains] == ["execute", "observe"] and "in_flight" in drains[1]["blocked_by"]
    assert len(repo.table("commands")) == 1


def _two_controllers_at_once(url: str) -> list[dict]:
    """Two controllers, each with its own engine on one store, judge fatal findings on 10 different nodes at the
    same moment under a breaker limit of 2 (20 % of 10)."""
    clock = ManualClock()
    config = from_mapping({"policy": {"mode": "act", "breaker": {"max_fraction": 0.2}}}).policy
    repos = [Repository(make_engine(url)) for _ in range(2)]
    for node in NODES:
        repos[0].ensure_node(node, clock.now())
    controllers = [Controller(MemoryTransport(100), r, config, Metrics(), clock, signer=CommandSigner(process_key()))
                   for r in repos]
    start = threading.Barrier(2)

    def judge(i: int) -> None:
        start.wait()
        for node in NODES[i::2]:
            controllers[i].on_finding(fatal(node, clock.now()), clock.now())

    threads = [threading.Thread(target=judge, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    state = repos[0].load_breaker()
    assert state is not None and state.is_open
    assert sorted(n for _, n in state.recent) == sorted(c["node"] for c in repos[0].table("commands"))
    return repos[0].table("commands")


def test_two_controllers_never_admit_past_the_breaker_limit(sqlite_url: str) -> None:
    upgrade(make_engine(sqlite_url))
    assert len(_two_controllers_at_once(sqlite_url)) == 2


def test_two_controllers_on_postgresql_never_admit_past_the_breaker_limit(pg_url: str) -> None:
    from tests.pg import fresh_postgres_store

    fresh_postgres_store(pg_url)
    assert len(_two_controllers_at_once(pg_url)) == 2


def test_a_long_command_does_not_hold_up_other_nodes_or_the_loop(repo: Repository) -> None:
    rig = Rig(repo)
    release = threading.Event()

    def stuck_drain(node: str, reason: str) -> None:  # slurmctld away for node 1's command only
        if node == "gpu-node-001":
            release.wait(30)
        FlakyScheduler.drain(rig.scheduler, node, reason)

    rig.scheduler.drain = stuck_drain  # type: ignore[method-assign]
    rig.actuator = rig.new_actuator(workers=4)
    rig.find("gpu-node-001")
    rig.find("gpu-node-002")
    rig.controller.step()
    rig.actuator.step()  # returns at once: both commands are on worker threads
    for _ in range(200):
        rig.actuator.step()
        rig.controller.step()
        if rig.scheduler.drain_reason("gpu-node-002") and len(rig.actuator.running) == 1:
            break  # node 2's command is finished (its drain is set before the rest of its steps end)
        threading.Event().wait(0.01)
    assert rig.scheduler.drain_reason("gpu-node-002") is not None
    assert rig.scheduler.drain_reason("gpu-node-001") is None and len(rig.actuator.running) == 1
    release.set()
    rig.actuator.wait()
    rig.pump()
    assert rig.scheduler.drain_reason("gpu-node-001") is not None
    assert sorted(rig.statuses()) == ["done", "done"]


def test_min_healthy_keeps_enough_nodes_in_service_and_the_breaker_closed(repo: Repository) -> None:
    """Issue 17: a 10-node partition that must keep 9 in service loses one node to a fatal fault; the second
    fault is observed, not acted on, and the breaker stays closed (the fleet is thin, not misbehaving)."""
    rig = Rig(repo, breaker={"max_fraction": 1.0, "min_healthy": 9})
    rig.find("gpu-node-001")
    rig.pump()
    rig.clock.advance(5)
    rig.find("gpu-node-002")
    rig.pump()
    drains = {d["node"]: d for d in repo.table("decisions") if d["action"] == "drain_requeue"}
    assert drains["gpu-node-001"]["mode"] == "execute" and drains["gpu-node-002"]["mode"] == "observe"
    assert "min_healthy" in drains["gpu-node-002"]["reason"]
    state = repo.load_breaker()
    assert state is not None and not state.is_open
    assert rig.scheduler.drain_reason("gpu-node-002") is None
