"""Auto-resume of Sentinel's own drains (issue 17): `sentinel check --resume` returns a node to service only when
its checks pass, Sentinel drained it, it booted after that drain and it is no lemon; the controller marks lemons in
the drain reason; the drain watch notices drains undone outside Sentinel. Against the real Slurm test cluster."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sentinel.actuator import LEMON_MARK
from sentinel.actuator.autoresume import judge_resume, resume_own_drain
from sentinel.actuator.slurm import SlurmScheduler
from sentinel.clock import ManualClock
from sentinel.config.actuation import SlurmActuatorConfig
from sentinel.controller.drain_watch import DrainWatch
from sentinel.events import FindingClass, Incident, IncidentStatus, Severity
from sentinel.obs.metrics import Metrics
from sentinel.store.repository import Repository
from sentinel_collectors.check import boot_ts
from tests.slurm_cluster import SlurmCluster
from tests.test_effects import Rig

OURS = "sentinel: inc-1 Xid 79: GPU has fallen off the bus"


@pytest.mark.parametrize(("reason", "since", "boot", "healthy", "resume", "why"), [
    (None, None, 200.0, True, False, "not drained"),
    ("maintenance by bob", 100.0, 200.0, True, False, "someone else"),
    (f"sentinel: inc-1 {LEMON_MARK} Xid 79", 100.0, 200.0, True, False, "lemon"),
    (OURS, 100.0, 200.0, False, False, "checks fail"),
    (OURS, None, 200.0, True, False, "cannot tell"),
    (OURS, 100.0, 50.0, True, False, "not rebooted"),
    (OURS, 100.0, 200.0, True, True, "booted after the drain"),
])
def test_only_our_drain_of_a_healthy_rebooted_non_lemon_node_is_undone(reason: str | None, since: float | None,
                                                                        boot: float, healthy: bool, resume: bool,
                                                                        why: str) -> None:
    verdict = judge_resume(reason, since, boot, healthy)
    assert verdict.resume is resume and why in verdict.why


def test_boot_time_comes_from_the_kernel(tmp_path: Path) -> None:
    assert boot_ts() is not None and boot_ts() < time.time()  # noqa: SIM300 (this host's own /proc/stat)
    (tmp_path / "stat").write_text("cpu  1 2 3\nbtime 1700000000\n")
    assert boot_ts(str(tmp_path / "stat")) == 1700000000.0
    assert boot_ts(str(tmp_path / "missing")) is None


def test_check_resume_on_the_real_cluster(slurm: SlurmCluster, tmp_path: Path) -> None:
    scheduler = SlurmScheduler(SlurmActuatorConfig(ack_dir=str(tmp_path / "ack"), slurm_conf=slurm.conf))
    scheduler.drain("node1", OURS)
    since = scheduler.drained_since("node1")
    assert since is not None and abs(since - time.time()) < 120  # sinfo's reason_changed_at
    assert resume_own_drain(scheduler, "node1", boot=since - 3600)["resumed"] is False  # booted before the drain
    assert slurm.drained("node1")
    done = resume_own_drain(scheduler, "node1", boot=since + 60)
    assert done["resumed"] is True and slurm.drained("node1") is None

    scheduler.drain("node2", f"sentinel: inc-2 {LEMON_MARK} Xid 79")
    assert resume_own_drain(scheduler, "node2", boot=time.time())["resumed"] is False
    slurm.run("scontrol", "update", "nodename=node3", "state=drain", "reason=bob: bad fan")
    assert resume_own_drain(scheduler, "node3", boot=time.time())["resumed"] is False
    assert slurm.drained("node2") and slurm.drained("node3")


def test_the_drain_watch_notices_a_drain_undone_outside_sentinel(slurm: SlurmCluster, repo: Repository,
                                                                   tmp_path: Path) -> None:
    scheduler = SlurmScheduler(SlurmActuatorConfig(ack_dir=str(tmp_path / "ack"), slurm_conf=slurm.conf))
    for node, incident in (("node1", "inc-1"), ("node2", "inc-2")):
        repo.ensure_node(node, 100.0)
        repo.save_incident(Incident(id=incident, node=node, opened_ts=100.0, updated_ts=100.0,
                                    status=IncidentStatus.MITIGATED, severity=Severity.FATAL, summary="Xid 79",
                                    kind=FindingClass.GPU_XID,
                                    finding_ids=[]))
        scheduler.drain(node, f"sentinel: {incident} Xid 79")
        repo.set_node_drained(node, incident)
    slurm.run("scontrol", "update", "nodename=node1", "state=resume")  # an operator, by hand
    metrics = Metrics()
    watch = DrainWatch(repo, scheduler, ManualClock(500.0), metrics, 60.0)
    assert watch.check() == ["node1"]
    # the detector accepts samples from these only, and the breaker counts the nodes seen among them
    assert repo.scheduler_nodes() == set(slurm.nodes())
    assert repo.drained_nodes() == [("node2", "inc-2")]
    status = {i["id"]: i["status"] for i in repo.table("incidents", order_by="id")}
    assert status == {"inc-1": "resolved", "inc-2": "mitigated"}
    assert metrics.nodes_returned._value.get() == 1
    assert watch.check() == []


def test_the_drain_of_a_lemon_carries_the_mark(repo: Repository) -> None:
    rig = Rig(repo, lemon={"min_incidents": 2})
    rig.find("gpu-node-001")
    rig.pump()
    [(node, incident)] = repo.drained_nodes()
    rig.clock.advance(3600)
    repo.node_returned(node, incident, rig.clock.now())  # repaired and resumed
    rig.find("gpu-node-001", n=1)  # the second incident in the lemon window
    rig.pump()
    reasons = [c["drain_reason"] for c in repo.table("commands")]
    assert len(reasons) == 2 and LEMON_MARK not in reasons[0] and LEMON_MARK in reasons[1]
    assert reasons[1].startswith("sentinel: ")
