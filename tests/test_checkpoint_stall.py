"""A checkpoint handshake that cannot be stalled (issue 38, item 6).

On e5bcaaa a `<job>.request` directory planted in the shared folder made a checkpoint-first command fail 10 of 10
resume rounds (the OSError was not a failed checkpoint) and the node was never drained; a started command never
expired; a `.ready` another user planted made the job's hook die of PermissionError; the ack's owner check turned
itself off when squeue gave no `user_id`. Real Slurm where a job runs; the tests run as root, so "another user" is
a file chowned to nobody (65534)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from sentinel.actuator.slurm import SlurmScheduler
from sentinel.actuator.steps import SchedulerActuator
from sentinel.clock import ManualClock, SystemClock
from sentinel.config.actuation import SlurmActuatorConfig
from sentinel.errors import CheckpointFailed
from sentinel.events import ActionKind, Command, Step, StepStatus
from sentinel.hooks import ack
from sentinel.runner import Completed
from sentinel.sim.scheduler import SimScheduler
from tests.slurm_cluster import SlurmCluster, wait_for
from tests.test_effects import Rig

NOBODY = 65534
FIXTURE = Path(__file__).parent / "fixtures" / "slurm" / "squeue-22.05.json"


def _command(node: str, ts: float, action: ActionKind = ActionKind.CHECKPOINT_DRAIN_REQUEUE) -> Command:
    return Command(id=f"inc-{node}:cmd", decision_id=f"inc-{node}:d", incident_id=f"inc-{node}", node=node,
                   action=action, ts=ts, expires_ts=ts + 300, drain_reason=f"sentinel: inc-{node} stall test")


def test_a_planted_request_cannot_stall_the_drain(slurm: SlurmCluster, tmp_path: Path) -> None:
    acks = tmp_path / "ack"
    acks.mkdir()
    job = slurm.submit(f"#!/bin/bash\ntrap '' USR1\ntouch {acks}/$SLURM_JOB_ID.ready\nsleep 300\n", "-o", "/dev/null")
    wait_for(lambda: ack.is_ready(acks, job), 30, "job running with its trap set and opted in")
    (acks / f"{job}.request").mkdir()  # where the request used to go
    (acks / "requests").mkdir()
    (acks / "requests" / f"{job}.request").mkdir()  # and where it goes now
    node = slurm.jobs()[job]["nodes"]
    scheduler = SlurmScheduler(SlurmActuatorConfig(ack_dir=str(acks), slurm_conf=slurm.conf, ack_timeout_s=1.5))
    try:
        results = {r.step: r for r in SchedulerActuator(scheduler, SystemClock()).execute(
            _command(node, time.time()))}
        assert results[Step.CHECKPOINT].status is StepStatus.FAILED
        assert "not a regular file" in results[Step.CHECKPOINT].detail and job in results[Step.CHECKPOINT].detail
        assert results[Step.DRAIN].status is StepStatus.OK  # the plan went on: drained and requeued anyway
        assert results[Step.VERIFY].status is StepStatus.OK, results[Step.VERIFY].detail
    finally:
        slurm.run("scancel", job)
        slurm.run("scontrol", "update", f"nodename={node}", "state=resume")


def test_a_request_folder_someone_else_made_is_refused_with_a_clear_reason(tmp_path: Path) -> None:
    folder = tmp_path / "ack" / "requests"
    folder.mkdir(parents=True)
    os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(ack.HandshakeError, match="belongs to uid 65534"):
        ack.write_request(tmp_path / "ack", ack.Request(request_id="r", job_id="42", ts=1.0))
    folder.rmdir()
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    with pytest.raises(ack.HandshakeError, match="nobody else may write it"):
        ack.write_request(tmp_path / "ack", ack.Request(request_id="r", job_id="42", ts=1.0))
    folder.rmdir()
    ack.write_request(tmp_path / "ack", ack.Request(request_id="r", job_id="42", ts=1.0))  # made by the actuator
    assert oct(folder.stat().st_mode & 0o777) == "0o755" and ack.read_request(tmp_path / "ack", "42") is not None


def test_a_planted_ready_or_ack_gives_the_job_a_clear_error(tmp_path: Path) -> None:
    acks = tmp_path / "ack"
    acks.mkdir()
    (acks / "42.ready").touch()
    os.chown(acks / "42.ready", NOBODY, NOBODY)
    with pytest.raises(ack.HandshakeError, match=r"42\.ready belongs to uid 65534.*planted"):
        ack.write_ready(acks, "42")
    (acks / "42.ack").mkdir()
    with pytest.raises(ack.HandshakeError, match=r"42\.ack exists and is not a regular file"):
        ack.write_ack(acks, ack.Ack(request_id="r", job_id="42", step=1, checkpoint="c", ts=1.0))


class NoUserSqueue:
    """squeue as recorded from Slurm 22.05, with the job's ``user_id`` left out (older or trimmed output)."""

    def run(self, argv: Sequence[str], timeout_s: float) -> Completed:
        data = json.loads(FIXTURE.read_text())
        for job in data["jobs"]:
            job.pop("user_id", None)
        return Completed(tuple(argv), 0, json.dumps(data), "", 0.0)


def test_the_owner_check_fails_closed_without_a_user_id(tmp_path: Path) -> None:
    acks = tmp_path / "ack"
    ack.write_ready(acks, "1")  # opted in, but whose file it is can no longer be checked
    scheduler = SlurmScheduler(SlurmActuatorConfig(ack_dir=str(acks)), NoUserSqueue())
    with pytest.raises(CheckpointFailed, match="no user_id"):
        scheduler.checkpoint("1")
    assert ack.read_request(acks, "1") is None  # never asked


class RefusingScheduler(SimScheduler):
    """The simulator's scheduler whose requeue always fails (a scheduler that keeps refusing)."""

    def requeue(self, job_id: str) -> None:
        raise RuntimeError("requeue refused (injected)")


def test_a_started_command_that_cannot_finish_is_abandoned_with_its_own_reason(repo) -> None:  # type: ignore[no-untyped-def]
    rig = Rig(repo)
    rig.scheduler.__class__ = RefusingScheduler
    rig.actuator = rig.new_actuator()
    rig.find("gpu-node-002")
    rig.pump(2)
    assert rig.statuses() == ["pending"]  # drained, the requeue failed: unfinished, resumed every 30 s
    rig.clock.advance(300 + 3600 + 1)  # past expiry + actuator.give_up_after_s (default)
    rig.actuator._resume_ts = float("-inf")
    rig.pump(3)
    assert rig.statuses() == ["failed"]
    verify = [r for r in repo.table("action_results") if r["step"] == "verify"]
    assert len(verify) == 1 and "abandoned" in verify[0]["detail"] and "expired" not in verify[0]["detail"]


def test_a_command_that_finishes_late_reports_its_real_outcome() -> None:
    clock = ManualClock()
    scheduler = SimScheduler(["gpu-node-001"], clock)
    command = _command("gpu-node-001", clock.now(), ActionKind.DRAIN_REQUEUE)
    actuator = SchedulerActuator(scheduler, clock)
    from sentinel.actuator.journal import MemoryJournal

    journal = MemoryJournal()
    journal.accept(command, clock.now(), b"")
    first = actuator.execute(command, journal)[0]  # the drain ran; pretend the process died right after it
    journal._steps[command.id] = {first.step: first}
    clock.advance(900)  # resumed well past its expiry, within give_up_after_s
    verify = actuator.execute(command, journal)[-1]
    assert verify.step is Step.VERIFY and verify.status is StepStatus.OK and "expired" not in verify.detail
