"""The Slurm actuator: names checked before any command, Slurm's JSON read robustly, and on the real cluster:
idempotent owned drains, resumes of our drains only, checkpoint handshakes, requeues that start at once, and
commands that survive a slurmctld restart."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from sentinel.actuator.slurm import SlurmScheduler
from sentinel.actuator.slurm_state import SlurmUnreachable, expand_hostlist, parse_jobs, parse_nodes
from sentinel.config import from_mapping
from sentinel.config.actuation import SlurmActuatorConfig
from sentinel.errors import ActuatorError, ConfigError
from sentinel.hooks import ack
from sentinel.runner import Completed
from tests.slurm_cluster import SlurmCluster, wait_for

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
HOSTILE_NODES = ["node1; rm -rf /", "node1$(id)", "node1`id`", "node1|cat", "node1 node2", "../node1", "node1\n",
                 "-node1", "node1&&x", ""]
HOSTILE_JOBS = ["1; ls", "1$(id)", "1 2", "--full", "1\n", "abc", "1/../2", ""]


class RecordingRunner:
    """Stands in for the Slurm binaries where no command may run: records every argv it is handed."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], timeout_s: float) -> Completed:
        self.calls.append(tuple(argv))
        return Completed(tuple(argv), 0, '{"errors": [], "jobs": [], "nodes": []}', "", 0.0)


def config(tmp_path: Path, **kw: object) -> SlurmActuatorConfig:
    return SlurmActuatorConfig(ack_dir=str(tmp_path / "ack"), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("node", HOSTILE_NODES)
def test_a_node_name_with_shell_metacharacters_is_refused_before_any_command_runs(tmp_path: Path, node: str) -> None:
    runner = RecordingRunner()
    scheduler = SlurmScheduler(config(tmp_path), runner)
    for call in (lambda: scheduler.drain(node, "sentinel: inc-1 hot"), lambda: scheduler.resume(node),
                 lambda: scheduler.jobs_on(node), lambda: scheduler.drain_reason(node)):
        with pytest.raises(ActuatorError, match="refusing node name"):
            call()
    assert runner.calls == []


@pytest.mark.parametrize("job", HOSTILE_JOBS)
def test_a_bad_job_id_is_refused_before_any_command_runs(tmp_path: Path, job: str) -> None:
    runner = RecordingRunner()
    scheduler = SlurmScheduler(config(tmp_path), runner)
    for call in (lambda: scheduler.checkpoint(job), lambda: scheduler.requeue(job)):
        with pytest.raises(ActuatorError, match="refusing job id"):
            call()
    assert runner.calls == []
    assert not (tmp_path / "ack").exists()


@pytest.mark.parametrize("reason", ["maintenance", "sentinel: x\nstate=resume", "sentinel: " + "x" * 300])
def test_a_drain_reason_without_our_prefix_or_with_control_characters_is_refused(tmp_path: Path, reason: str) -> None:
    runner = RecordingRunner()
    with pytest.raises(ActuatorError, match="refusing drain reason"):
        SlurmScheduler(config(tmp_path), runner).drain("node1", reason)
    assert runner.calls == []


def test_squeue_json_of_slurm_22_05_gives_running_jobs_with_their_nodes() -> None:
    jobs = {j.job_id: j for j in parse_jobs((FIXTURES / "squeue-22.05.json").read_text())}
    assert jobs["1"].state == "RUNNING" and jobs["1"].nodes == ("node1", "node2")
    assert jobs["2"].state == "PENDING" and jobs["2"].held and jobs["2"].nodes == ()


def test_sinfo_json_of_slurm_22_05_gives_drain_flags_and_reasons() -> None:
    nodes = {n.name: n for n in parse_nodes((FIXTURES / "sinfo-22.05.json").read_text())}
    assert nodes["node3"].drained and nodes["node3"].reason == "sentinel: inc-node3-1 GPU 2 at 95.0 C"
    assert not nodes["node4"].drained


def test_later_json_shapes_are_read_too() -> None:
    squeue = {"errors": [], "jobs": [{"job_id": 7, "job_state": ["RUNNING"], "nodes": "gpu-[08-10],cpu1",
                                      "priority": {"set": True, "number": 5}, "restart_cnt": 1}]}
    job = parse_jobs(json.dumps(squeue))[0]
    assert job.nodes == ("gpu-08", "gpu-09", "gpu-10", "cpu1") and job.priority == 5 and job.state == "RUNNING"
    sinfo = {"nodes": [{"name": "gpu-08", "state": ["IDLE", "DRAIN"], "reason": "x"}]}
    assert parse_nodes(json.dumps(sinfo))[0].drained


def test_json_errors_mean_slurmctld_is_unreachable_and_hostile_names_in_answers_are_refused() -> None:
    down = {"errors": [{"description": "Failed while looking for jobs", "error": "Unspecified error"}], "jobs": []}
    with pytest.raises(SlurmUnreachable, match="Failed while looking for jobs"):
        parse_jobs(json.dumps(down))
    with pytest.raises(ActuatorError, match="refusing node name"):
        parse_jobs(json.dumps({"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "n1;reboot"}]}))
    with pytest.raises(ActuatorError, match="not JSON"):
        parse_nodes("slurm_load_node error")


def test_hostlists_expand_with_padding_and_several_ranges() -> None:
    assert expand_hostlist("node[1-3,7]") == ["node1", "node2", "node3", "node7"]
    assert expand_hostlist("n[08-10]-ib,login") == ["n08-ib", "n09-ib", "n10-ib", "login"]


def test_config_names_the_path_of_a_bad_slurm_setting() -> None:
    with pytest.raises(ConfigError, match="actuator.slurm.signal: must be a signal name"):
        from_mapping({"actuator": {"kind": "slurm", "slurm": {"signal": "USR1; reboot"}}})
    with pytest.raises(ConfigError, match="actuator.slurm.ack_timeout_s"):
        from_mapping({"actuator": {"slurm": {"ack_timeout_s": 0}}})


# --- the real cluster -------------------------------------------------------------------------------------------


def test_drain_is_idempotent_and_resume_touches_only_our_drains(slurm: SlurmCluster, tmp_path: Path) -> None:
    scheduler = SlurmScheduler(config(tmp_path, slurm_conf=slurm.conf))
    reason = "sentinel: inc-node2-1 GPU 3 at 95.0 C"
    scheduler.drain("node2", reason)
    changed = slurm.nodes()["node2"]["reason_changed_at"]
    scheduler.drain("node2", reason)  # a redelivered command changes nothing
    assert slurm.drained("node2") == reason and slurm.nodes()["node2"]["reason_changed_at"] == changed
    assert scheduler.drain_reason("node2") == reason and scheduler.drain_reason("node1") is None
    assert scheduler.resume("node2") is True and slurm.drained("node2") is None
    assert scheduler.resume("node2") is False

    slurm.run("scontrol", "update", "nodename=node3", "state=drain", "reason=bad DIMM (operator)")
    with pytest.raises(ActuatorError, match="refusing to resume node3: drained by someone else"):
        scheduler.resume("node3")
    with pytest.raises(ActuatorError, match="already drained by someone else"):
        scheduler.drain("node3", reason)
    assert slurm.drained("node3") == "bad DIMM (operator)"


def test_a_requeued_job_starts_again_at_once_on_another_node(slurm: SlurmCluster, tmp_path: Path) -> None:
    scheduler = SlurmScheduler(config(tmp_path, slurm_conf=slurm.conf))
    job = slurm.submit("#!/bin/bash\nsleep 300\n", "--requeue", "-o", "/dev/null")

    def running_on() -> str | None:
        info = slurm.jobs().get(job)
        return str(info["nodes"]) if info and info["job_state"] == "RUNNING" else None

    node = wait_for(running_on, 30, "job running")
    assert scheduler.jobs_on(node) == [job]
    scheduler.drain(node, f"sentinel: inc-{node}-1 test")
    started = time.monotonic()
    scheduler.requeue(job)
    assert scheduler.jobs_on(node) == []
    moved_to = wait_for(running_on, 30, "job running again")
    assert moved_to != node and slurm.jobs()[job]["restart_cnt"] == 1
    assert time.monotonic() - started < 30  # not held back the 121 s Slurm gives a requeued job by default


def test_checkpoint_waits_for_the_acknowledgement_with_its_request_id(slurm: SlurmCluster, tmp_path: Path) -> None:
    """A stand-in job answers the way the hook does (the hook's own test is the end-to-end one)."""
    acks = tmp_path / "ack"
    script = f"""#!/bin/bash
answer() {{ python3 -c 'import json,sys,time; r=json.load(open(sys.argv[1]));
json.dump(dict(request_id=r["request_id"], job_id=r["job_id"], step=5, checkpoint="x", ts=time.time()),
open(sys.argv[2], "w"))' {acks}/requests/$SLURM_JOB_ID.request {acks}/$SLURM_JOB_ID.ack; }}
trap answer USR1
touch {acks}/$SLURM_JOB_ID.ready
while :; do sleep 0.1; done
"""
    scheduler = SlurmScheduler(config(tmp_path, slurm_conf=slurm.conf, ack_timeout_s=20.0))
    acks.mkdir()
    job = slurm.submit(script, "-o", str(tmp_path / "out"))
    wait_for(lambda: (acks / f"{job}.ready").exists(), 30, "job running with its trap set")
    ack.write_ack(acks, ack.Ack(request_id="an-old-one", job_id=job, step=1, checkpoint="old", ts=1.0))
    assert scheduler.checkpoint(job) is True
    assert scheduler.acks[job].step == 5 and scheduler.acks[job].request_id != "an-old-one"
    assert ack.read_request(acks, job) is None


def test_checkpoint_gives_up_on_a_job_that_never_answers(slurm: SlurmCluster, tmp_path: Path) -> None:
    scheduler = SlurmScheduler(config(tmp_path, slurm_conf=slurm.conf, ack_timeout_s=1.5))
    acks = tmp_path / "ack"
    acks.mkdir()
    # the signal must not reach the shell before its trap is set (it would die of the default action); the
    # .ready file is the job's opt-in (only such jobs are signalled)
    job = slurm.submit(f"#!/bin/bash\ntrap '' USR1\ntouch {acks}/$SLURM_JOB_ID.ready\nsleep 300\n", "-o", "/dev/null")
    wait_for(lambda: ack.is_ready(acks, job), 30, "job running with its trap set")
    started = time.monotonic()
    assert scheduler.checkpoint(job) is False
    assert 1.5 <= time.monotonic() - started < 10
    assert slurm.jobs()[job]["job_state"] == "RUNNING"  # the signal was trapped: the job lives on


def test_a_drain_issued_while_slurmctld_is_down_completes_after_it_restarts(slurm: SlurmCluster,
                                                                           tmp_path: Path) -> None:
    scheduler = SlurmScheduler(config(tmp_path, slurm_conf=slurm.conf, backoff_initial_s=0.2, backoff_max_s=1.0,
                                      command_timeout_s=10.0))
    reason = "sentinel: inc-node4-1 outage test"
    slurm.ctld("stop")
    try:
        restart = threading.Timer(2.0, slurm.ctld, args=("start",))
        restart.start()
        scheduler.drain("node4", reason)
        restart.join()
    finally:
        wait_for(lambda: slurm.run("scontrol", "ping", check=False).stdout.count("UP"), 30, "slurmctld")
    assert slurm.drained("node4") == reason
    slurm.ctld("stop")  # the drain survives a restart of slurmctld (its saved state)
    slurm.ctld("start")
    assert scheduler.drain_reason("node4") == reason


def test_slurmctld_away_longer_than_the_retry_budget_is_a_clear_error(slurm: SlurmCluster, tmp_path: Path) -> None:
    scheduler = SlurmScheduler(config(tmp_path, slurm_conf=slurm.conf, unreachable_timeout_s=1.0,
                                      backoff_initial_s=0.3, command_timeout_s=3.0))
    slurm.ctld("stop")
    try:
        with pytest.raises(ActuatorError, match="slurmctld unreachable for 1 s"):
            scheduler.drain_reason("node1")
    finally:
        slurm.ctld("start")


def test_the_actuation_bench_fails_with_the_reason_when_its_training_job_dies_at_start(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    """Issue 17: without torch the job exits 1 at once and the bench kept waiting for an acknowledgement."""
    from sentinel_bench.actuate import _ended

    scheduler = SlurmScheduler(config(tmp_path, slurm_conf=slurm.conf))
    job = slurm.submit("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n",
                       f"--output={tmp_path / 'job.log'}")
    wait_for(lambda: (j := scheduler.job(job)) is None or j.state not in ("PENDING", "RUNNING", "CONFIGURING",
                                                                          "COMPLETING"), 30, "the job to end")
    with pytest.raises(ActuatorError, match="No module named torch"):
        _ended(scheduler, job, tmp_path)
