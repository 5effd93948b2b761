"""Carries out a command on a Scheduler as named, verified steps: checkpoint -> drain -> requeue -> verify.

Resumable and idempotent: each step's result goes to the actuator's journal before the next step runs, so a
command cut short resumes at its next step; and each step is safe to repeat against the scheduler (a node
already drained with the same reason is not drained again, jobs already gone are not requeued again), so the
step that was running when the process died can run again. Each step yields an ActionResult.
"""

from __future__ import annotations

import logging

from sentinel.actuator import JobTimingSource, Scheduler, StepLog
from sentinel.actuator.journal import MemoryJournal
from sentinel.clock import Clock
from sentinel.config import CostConfig
from sentinel.errors import CheckpointFailed, SentinelError
from sentinel.events import ActionKind, ActionResult, Command, Step, StepStatus
from sentinel.obs.metrics import ActuatorMetrics

log = logging.getLogger(__name__)


class SchedulerActuator:
    def __init__(self, scheduler: Scheduler, clock: Clock, cost: CostConfig | None = None,
                 metrics: ActuatorMetrics | None = None, give_up_after_s: float = 3600.0) -> None:
        """``cost`` skips checkpoints that buy nothing, when the scheduler reports job timing (JobTimingSource).
        A started command still unfinished ``give_up_after_s`` past its expiry (every resume failed) is
        abandoned: its verify step fails with that reason, so it stops being retried (``actuator.give_up_after_s``)."""
        self.scheduler = scheduler
        self.clock = clock
        self.cost = cost
        self.metrics = metrics
        self.give_up_after_s = give_up_after_s

    def execute(self, command: Command, journal: StepLog | None = None) -> list[ActionResult]:
        """Carry out ``command``'s steps not yet in ``journal``, recording each before the next; return every
        step's result (recorded ones included). Without a journal the command runs from its first step."""
        journal = journal if journal is not None else MemoryJournal()
        done = {r.step: r for r in journal.steps(command.id)}
        results = list(done.values())

        def record(step: Step, status: StepStatus, detail: str, jobs: list[str] | None = None) -> None:
            result = step_result(command, self.clock.now(), step, status, detail, jobs)
            journal.record(result, result.ts)
            results.append(result)

        if Step.VERIFY in done:
            return results
        if not done and self.clock.now() > command.expires_ts:  # one already started is finished, not dropped
            record(Step.VERIFY, StepStatus.FAILED, "command expired before it could be carried out")
            return results
        if done and self.clock.now() > command.expires_ts + self.give_up_after_s:
            steps = ", ".join(f"{r.step.value} {r.status.value}" for r in results)
            record(Step.VERIFY, StepStatus.FAILED,
                   f"abandoned: started but not finished {self.give_up_after_s:.0f} s after its expiry "
                   f"(actuator.give_up_after_s; done: {steps}); the node needs a person")
            return results
        try:
            jobs = self.scheduler.jobs_on(command.node)
            if command.action is ActionKind.CHECKPOINT_DRAIN_REQUEUE and Step.CHECKPOINT not in done:
                record(Step.CHECKPOINT, *self._checkpoint(jobs))
            if Step.DRAIN not in done:
                current = self.scheduler.drain_reason(command.node)
                if current == command.drain_reason:
                    record(Step.DRAIN, StepStatus.SKIPPED, "already drained by this command")
                else:
                    self.scheduler.drain(command.node, command.drain_reason)
                    record(Step.DRAIN, StepStatus.OK, f"drained: {command.drain_reason}")
            if Step.REQUEUE not in done:
                for job in jobs:
                    self.scheduler.requeue(job)
                record(Step.REQUEUE, StepStatus.OK if jobs else StepStatus.SKIPPED,
                       f"requeued {len(jobs)} job(s)" if jobs else "no jobs on the node", jobs)
            left = self.scheduler.jobs_on(command.node)
            drained = self.scheduler.drain_reason(command.node) == command.drain_reason
            ok = drained and not left
            record(Step.VERIFY, StepStatus.OK if ok else StepStatus.FAILED,
                   "node drained and empty" if ok else f"drained={drained}, jobs still on node: {left}")
        except SentinelError as exc:
            log.error("command %s on %s failed: %s", command.id, command.node, exc)
            record(Step.VERIFY, StepStatus.FAILED, f"scheduler error: {exc}")
        return results

    def _checkpoint(self, jobs: list[str]) -> tuple[StepStatus, str, list[str]]:
        skipped = {j: why for j in jobs if (why := self._not_worth_it(j))}
        wanted = [j for j in jobs if j not in skipped]
        acked, failed = [], {}
        for job in wanted:
            try:
                if self.scheduler.checkpoint(job):
                    acked.append(job)
            except (CheckpointFailed, OSError) as exc:  # this job is not saved; the drain goes on (issue 38)
                failed[job] = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                log.error("checkpoint of job %s failed: %s; draining without it", job, failed[job])
        missing = sorted(set(wanted) - set(acked) - set(failed))
        status = StepStatus.OK if not missing and not failed else StepStatus.FAILED
        if jobs and len(skipped) == len(jobs):
            status = StepStatus.SKIPPED
        detail = f"{len(acked)}/{len(wanted)} job(s) checkpointed" + (
            f"; no ack from {missing}" if missing else ""
        ) + "".join(f"; {j} failed: {why}" for j, why in sorted(failed.items())) + "".join(
            f"; {j} not checkpointed: {why}" for j, why in sorted(skipped.items()))
        return status, detail, acked

    def _not_worth_it(self, job: str) -> str | None:
        """Why checkpointing ``job`` now would buy nothing (cost awareness), or None to checkpoint it."""
        if self.cost is None or not isinstance(self.scheduler, JobTimingSource):
            return None
        timing = self.scheduler.job_timing(job)
        if timing is None:
            return None
        now, why, label = self.clock.now(), None, ""
        if timing.last_checkpoint_ts is not None and now - timing.last_checkpoint_ts < \
                self.cost.skip_if_checkpointed_within_s:
            why, label = f"checkpointed {now - timing.last_checkpoint_ts:.0f} s ago", "recent_checkpoint"
        elif timing.end_ts is not None and timing.end_ts - now < self.cost.skip_if_ends_within_s:
            why, label = f"ends in {max(timing.end_ts - now, 0):.0f} s", "ends_soon"
        if why and self.metrics is not None:
            self.metrics.checkpoints_skipped.labels(label).inc()
        return why


class DryRunActuator:
    """Records what it would do and touches nothing: the default actuator."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def execute(self, command: Command, journal: StepLog | None = None) -> list[ActionResult]:
        steps = [Step.DRAIN, Step.REQUEUE, Step.VERIFY]
        if command.action is ActionKind.CHECKPOINT_DRAIN_REQUEUE:
            steps.insert(0, Step.CHECKPOINT)
        now = self.clock.now()
        results = [step_result(command, now, step, StepStatus.DRY_RUN,
                               f"dry-run: would {step.value} {command.node}") for step in steps]
        if journal is not None:
            for result in results:
                journal.record(result, now)
        return results


def step_result(command: Command, ts: float, step: Step, status: StepStatus, detail: str,
                jobs: list[str] | None = None) -> ActionResult:
    """The result of one step of ``command``; its id (``<command>:<step>``) makes a repeat a no-op in the store."""
    return ActionResult(id=f"{command.id}:{step.value}", command_id=command.id, incident_id=command.incident_id,
                        node=command.node, ts=ts, step=step, status=status, detail=detail[:4096], job_ids=jobs or [])
