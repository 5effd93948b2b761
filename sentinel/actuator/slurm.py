"""The Slurm backend of the Scheduler seam: scontrol, squeue, sinfo and scancel, argv lists through a runner.

Contract, step by step (``SchedulerActuator`` calls them in the order checkpoint -> drain -> requeue -> verify):

- every node name and job id is checked before any command runs; the drain reason must carry our prefix;
- ``drain`` writes ``state=drain reason="sentinel: <incident> <summary>"``; a node already drained by someone
  else is left alone (an error says so), and ``resume`` only resumes nodes whose reason we wrote;
- ``checkpoint`` writes a request file, signals the batch shell (``scancel --signal=USR1 --batch``) and waits for
  the job's acknowledgement carrying the same request id (sentinel.hooks.ack), or a timeout, or the job's end;
- ``requeue`` runs ``scontrol requeue`` and then lets the job start at once: Slurm holds a requeued job back for
  ``cred_expire + 1`` s (121 s by default), so it sets ``StartTime=now`` (and releases a held job);
- every call is retried with exponential backoff while slurmctld does not answer, for up to
  ``unreachable_timeout_s``; slurmctld keeps drains and queued jobs in its saved state across a restart.

Repeating any step changes nothing: a node drained with the same reason is not drained again, a job already
pending is not requeued again.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from sentinel.actuator import OWNED_REASON_PREFIX
from sentinel.actuator.slurm_state import (
    ON_NODE_STATES,
    SlurmJob,
    SlurmNode,
    SlurmUnreachable,
    check_job,
    check_node,
    parse_jobs,
    parse_nodes,
)
from sentinel.clock import Clock, SystemClock
from sentinel.config.actuation import SlurmActuatorConfig
from sentinel.errors import ActuatorError, CheckpointFailed
from sentinel.hooks import ack
from sentinel.runner import NOT_FOUND, TIMED_OUT, CommandRunner, Completed
from sentinel.slurm_cli import SlurmCli

log = logging.getLogger(__name__)
T = TypeVar("T")

OWNED_PREFIX = OWNED_REASON_PREFIX  # the controller writes "sentinel: <incident> <summary>"
UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|Communication connection failure|"
    r"Zero Bytes were transmitted|Transport endpoint is not connected|slurm_receive_msg|Connection reset",
    re.IGNORECASE,
)
GONE = re.compile(r"Invalid job id|already completing or completed|Job has already finished", re.IGNORECASE)


def owned(reason: str | None) -> bool:
    return bool(reason) and str(reason).startswith(OWNED_PREFIX)


def check_reason(reason: str) -> str:
    if not owned(reason) or not reason.isprintable() or len(reason) > 256:
        raise ActuatorError(f"refusing drain reason {reason!r}: must start with {OWNED_PREFIX!r}, be printable and "
                            "at most 256 characters")
    return reason


class SlurmScheduler:
    def __init__(self, config: SlurmActuatorConfig, runner: CommandRunner | None = None,
                 stop: threading.Event | None = None, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.cli = SlurmCli.from_config(config, runner)
        self.stop = stop or threading.Event()
        self.acks: dict[str, ack.Ack] = {}  # the last acknowledgement seen per job (its step and save time)

    # --- commands, with retries while slurmctld is away ---------------------------------------------------------
    def _run(self, argv: Sequence[str], tolerate: re.Pattern[str] | None = None) -> Completed:
        """Run one Slurm command; retry with backoff while slurmctld is unreachable; raise on any other failure
        unless its message matches ``tolerate`` (then the caller reads the result)."""
        return self._retrying(lambda: self._once(argv, tolerate), " ".join(argv[:3]))

    def _once(self, argv: Sequence[str], tolerate: re.Pattern[str] | None) -> Completed:
        done = self.cli.complete(*argv)
        message = (done.stderr or done.stdout).strip()
        if done.returncode == 0 or (tolerate is not None and tolerate.search(message)):
            return done
        if done.returncode == TIMED_OUT or UNREACHABLE.search(message):
            raise SlurmUnreachable(f"{done.argv[0]}: {message}")
        if done.returncode == NOT_FOUND:
            raise ActuatorError(f"{message} (set actuator.slurm.bin_dir)")
        raise ActuatorError(f"{' '.join(done.argv[:4])}: exit {done.returncode}: {message}")

    def _retrying(self, call: Callable[[], T], what: str) -> T:
        deadline = time.monotonic() + self.config.unreachable_timeout_s
        delay = self.config.backoff_initial_s
        while True:
            try:
                return call()
            except SlurmUnreachable as exc:
                if time.monotonic() + delay > deadline:
                    raise ActuatorError(f"slurmctld unreachable for {self.config.unreachable_timeout_s:g} s: "
                                        f"{exc}") from None
                log.warning("%s: slurmctld unreachable (%s); retrying in %.1f s", what, exc, delay)
                if self.stop.wait(delay):
                    raise ActuatorError(f"{what}: stopped while slurmctld was unreachable") from None
                delay = min(delay * 2, self.config.backoff_max_s)

    # --- reading state -----------------------------------------------------------------------------------------
    def jobs(self) -> list[SlurmJob]:
        return self._retrying(lambda: parse_jobs(self._once(["squeue", "--json"], None).stdout), "squeue")

    def job(self, job_id: str) -> SlurmJob | None:
        check_job(job_id)
        return next((j for j in self.jobs() if j.job_id == job_id), None)

    def nodes(self) -> list[SlurmNode]:
        return self._retrying(lambda: parse_nodes(self._once(["sinfo", "--json"], None).stdout), "sinfo")

    def node(self, name: str) -> SlurmNode:
        check_node(name)
        for node in self.nodes():
            if node.name == name:
                return node
        raise ActuatorError(f"Slurm has no node named {name!r}")

    # --- the Scheduler protocol --------------------------------------------------------------------------------
    def jobs_on(self, node: str) -> list[str]:
        check_node(node)
        return [j.job_id for j in self.jobs() if j.state in ON_NODE_STATES and node in j.nodes]

    def drain_reason(self, node: str) -> str | None:
        found = self.node(node)
        return found.reason if found.drained else None

    def drain(self, node: str, reason: str) -> None:
        check_node(node)
        check_reason(reason)
        current = self.node(node)
        if current.drained and current.reason == reason:
            return
        if current.drained and not owned(current.reason):
            raise ActuatorError(f"{node} is already drained by someone else ({current.reason!r}); left as it is")
        self._run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])
        log.info("drained %s: %s", node, reason)

    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes()]

    def drained_since(self, node: str) -> float | None:
        found = self.node(node)
        return found.reason_ts if found.drained else None

    def resume(self, node: str) -> bool:
        """Return ``node`` to service if, and only if, Sentinel drained it; False when it was not drained."""
        current = self.node(node)
        if not current.drained:
            return False
        if not owned(current.reason):
            raise ActuatorError(f"refusing to resume {node}: drained by someone else ({current.reason!r})")
        self._run(["scontrol", "update", f"nodename={node}", "state=resume"])
        log.info("resumed %s (was: %s)", node, current.reason)
        return True

    def checkpoint(self, job_id: str) -> bool:
        """Ask the job to checkpoint and wait for its acknowledgement; False on timeout or when the job ended.
        ``CheckpointFailed`` when the handshake cannot run (the job's owner is unknown, the request cannot be
        written): the step says why and the plan goes on without this checkpoint."""
        check_job(job_id)
        directory = self.config.ack_dir
        # Always a fresh, unguessable request: one found in the folder may have been planted by whoever else can
        # write there, together with a matching acknowledgement (issue 19).
        running = self.job(job_id)
        if running is None:
            return False  # ended: nothing to save
        owner = running.user_id  # only the job's own user answers for it
        if owner is None:  # fail closed: without it anyone who can write the folder could answer (issue 38)
            raise CheckpointFailed(f"squeue gives no user_id for job {job_id}: its acknowledgement's owner "
                                   "cannot be checked, so it is not asked")
        if not ack.is_ready(directory, job_id, owner):  # no hook: the signal would kill the job, not save it
            log.info("job %s has no checkpoint hook ready (%s); not signalled", job_id,
                     ack.ready_path(directory, job_id))
            return False
        request = ack.Request(request_id=secrets.token_hex(16), job_id=job_id, ts=self.clock.now())
        try:
            ack.write_request(directory, request)
        except ack.HandshakeError as exc:
            raise CheckpointFailed(str(exc)) from None
        target = "--batch" if self.config.signal_target == "batch" else "--full"
        sent = self._run(["scancel", f"--signal={self.config.signal}", target, job_id], tolerate=GONE)
        if sent.returncode != 0:
            ack.clear_request(directory, job_id)
            return False
        deadline = time.monotonic() + self.config.ack_timeout_s
        next_check = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            got = ack.read_ack(directory, job_id, owner)
            if got is not None and got.request_id == request.request_id:
                self.acks[job_id] = got
                ack.clear_request(directory, job_id)
                log.info("job %s checkpointed at step %d (%s)", job_id, got.step, got.checkpoint)
                return True
            if time.monotonic() >= next_check:  # a job that ended will never answer
                next_check = time.monotonic() + 1.0
                job = self.job(job_id)
                if job is None or job.state != "RUNNING":
                    break
            if self.stop.wait(self.config.poll_s):
                break
        ack.clear_request(directory, job_id)
        return False

    def requeue(self, job_id: str) -> None:
        """Requeue the job, then make it eligible at once; return when it may start (or started) elsewhere."""
        before = self.job(job_id)
        if before is None:
            log.info("job %s is gone: nothing to requeue", job_id)
            return
        done = self._run(["scontrol", "requeue", job_id], tolerate=re.compile(r"pending execution|" + GONE.pattern))
        if done.returncode != 0 and GONE.search(done.stderr):
            log.info("job %s is gone: nothing to requeue", job_id)
            return
        deadline = time.monotonic() + self.config.requeue_start_timeout_s
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job is None or (job.state == "RUNNING" and job.restarts > before.restarts):
                return
            if job.state == "PENDING":
                if job.held:
                    self._run(["scontrol", "release", job_id])
                elif job.reason == "BeginTime" or job.eligible_ts > self.clock.now():
                    # Slurm holds a requeued job back for cred_expire + 1 s (121 s by default)
                    self._run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], tolerate=GONE)
                else:
                    return  # eligible: the scheduler starts it as soon as resources allow
            # COMPLETING: the old run is still being torn down; its end would reset the begin time
            if self.stop.wait(self.config.poll_s):
                return
        log.warning("job %s requeued but not eligible after %.0f s", job_id, self.config.requeue_start_timeout_s)
