"""Auto-resume (opt-in, ``check.resume_own_drains``): a node Sentinel drained goes back into service by itself once
it has been rebooted (or repaired and booted) and its checks pass, as Slurm NHC resumes its own drains.

Never for a lemon: the controller marks the drain reason of a node with repeated incidents (``LEMON_MARK``), and
such a node waits for a person (``sentinel resume NODE``). Never a drain someone else made. Never before a boot that
came after the drain: a node that merely looks healthy again has not been repaired (the fault may be latent, as an
Xid 79 often is until the next load).
"""

from __future__ import annotations

from dataclasses import dataclass

from sentinel.actuator import LEMON_MARK, OWNED_REASON_PREFIX, Resumable


@dataclass(frozen=True)
class Verdict:
    resume: bool
    why: str


def judge_resume(reason: str | None, drained_since: float | None, boot_ts: float | None, healthy: bool) -> Verdict:
    """Whether this node may be returned to service now (pure: the caller reads the scheduler and the host)."""
    if reason is None:
        return Verdict(False, "not drained")
    if not reason.startswith(OWNED_REASON_PREFIX):
        return Verdict(False, f"drained by someone else ({reason!r}); left as it is")
    if LEMON_MARK in reason:
        return Verdict(False, "a lemon node (repeated incidents): a person resumes it (`sentinel resume NODE`)")
    if not healthy:
        return Verdict(False, "its checks fail")
    if drained_since is None or boot_ts is None:
        return Verdict(False, "cannot tell whether it rebooted since the drain (no drain or boot time)")
    if boot_ts <= drained_since:
        return Verdict(False, "not rebooted since the drain")
    return Verdict(True, "Sentinel's drain, its checks pass, and it booted after the drain")


def resume_own_drain(scheduler: Resumable, node: str, boot: float | None) -> dict[str, object]:
    """For a node whose checks passed: ask the scheduler about it and resume it when ``judge_resume`` says so;
    what was done and why."""
    reason = scheduler.drain_reason(node)
    verdict = judge_resume(reason, scheduler.drained_since(node) if reason else None, boot, healthy=True)
    if verdict.resume:
        scheduler.resume(node)
    return {"resumed": verdict.resume, "why": verdict.why, "drain_reason": reason}
