"""``sentinel-bench actuate``: how fast Sentinel acts on a real Slurm cluster (it must already run; SLURM_CONF).

Three measures, each on the real path:

- decision -> drain accepted: a fatal finding enters the in-process pipeline (controller, policy, commands
  transport, actuator, Slurm backend); from the decision's timestamp to the drain step's result, recorded once
  ``scontrol update state=drain`` returned success, i.e. slurmctld accepted it. Beside it, the baseline: a bare
  ``scontrol update state=drain`` alone (what Slurm itself costs). Goal: p99 <= 1 s.
- checkpoint request -> acknowledgement: a real 2-rank PyTorch job (sentinel.hooks.example_train, gloo, DCP
  saves) is asked to checkpoint again and again; from the request to the matching acknowledgement.
- requeue -> running again: the job's node is drained, the job requeued; until squeue shows it running
  elsewhere, and until its training resumed from the checkpoint (that includes starting Python and torch).

Nodes drained here are resumed afterwards (only our drains); the job is cancelled.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from sentinel.actuator.slurm import SlurmScheduler
from sentinel.clock import SystemClock
from sentinel.config import from_mapping
from sentinel.config.actuation import SlurmActuatorConfig
from sentinel.daemon import build_pipeline, open_repository
from sentinel.errors import ActuatorError
from sentinel.events import Finding, FindingClass, Recommendation, Severity
from sentinel.hooks.batch import batch_script
from sentinel.obs.metrics import Metrics
from sentinel.tables import render
from sentinel.transport import FINDINGS

GOAL_DRAIN_P99_S = 1.0


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 4) if values else None


def _until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise ActuatorError(f"bench actuate: timed out after {timeout_s:g} s waiting for {what}")


def _ended(slurm: SlurmScheduler, job: str, work: Path) -> bool:
    """False while the job may still start training; raise with its log's tail when it ended instead (a job that
    dies at start, e.g. without torch, must fail the bench with the reason, not leave it waiting)."""
    state = slurm.job(job)
    if state is not None and state.state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
        return False
    log = work / "job.log"
    tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
    raise ActuatorError(f"bench actuate: job {job} ended before training ({state.state if state else 'gone'}): "
                        + (" | ".join(tail) or f"no output in {log}"))


def _decision_to_drain(config: SlurmActuatorConfig, node: str, workdir: Path, i: int) -> float:
    store = workdir / f"store-{i}.db"
    app = from_mapping({"store": {"url": f"sqlite:///{store}"},
                        "actuator": {"kind": "slurm", "slurm": msgspec.to_builtins(config)},
                        "policy": {"mode": "act", "cooldown_s": 0, "breaker": {"max_fraction": 1.0}}})
    repo = open_repository(app, migrate=True)
    pipeline = build_pipeline(app, SystemClock(), Metrics(), repo)
    now = time.time()
    finding = Finding(id=f"bench-{i}", node=node, ts=now, observed_ts=now, kind=FindingClass.GPU_LOST,
                      rule="gpu-lost", severity=Severity.FATAL, recommendation=Recommendation.DRAIN, confidence=1.0,
                      summary="bench: GPU 0 no longer answers", gpu_index=0)
    pipeline.transport.publish(FINDINGS, node, pipeline.detector.sealer.seal(finding))
    pipeline.pump()
    decision = repo.table("decisions")[0]
    drain = next(r for r in repo.table("action_results") if r["step"] == "drain")
    if drain["status"] != "ok":
        raise ActuatorError(f"bench actuate: drain of {node} failed: {drain['detail']}")
    repo.engine.dispose()
    return float(drain["ts"] - decision["ts"])


def run_actuate_bench(slurm_conf: str, drains: int = 30, checkpoints: int = 5, requeues: int = 3,
                      workdir: str | None = None, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    work = Path(workdir or tempfile.mkdtemp(prefix="sentinel-bench-actuate-"))
    config = SlurmActuatorConfig(slurm_conf=slurm_conf, ack_dir=str(work / "ack"), ack_timeout_s=60.0)
    slurm = SlurmScheduler(config)
    nodes = sorted(n.name for n in slurm.nodes() if not n.drained)
    if len(nodes) < 2:
        raise ActuatorError(f"bench actuate: needs 2 nodes in service, found {nodes}")
    baseline: list[float] = []
    accepted: list[float] = []
    progress(f"decision -> drain accepted, {drains} times over {', '.join(nodes)}")
    for i in range(drains):
        node = nodes[i % len(nodes)]
        _ready(slurm, node)
        accepted.append(_decision_to_drain(config, node, work, i))
        slurm.resume(node)
        started = time.monotonic()
        bare = slurm.cli.complete("scontrol", "update", f"nodename={node}", "state=drain",
                                  "reason=sentinel: bench baseline")
        baseline.append(time.monotonic() - started)
        if bare.returncode != 0:
            raise ActuatorError(f"bench actuate: scontrol drain failed: {bare.stderr.strip()}")
        slurm.resume(node)
    result: dict[str, Any] = {
        "nodes": len(nodes),
        "drain_samples": drains,
        "drain_accept_p50_s": _pct(accepted, 50), "drain_accept_p99_s": _pct(accepted, 99),
        "drain_accept_max_s": round(max(accepted), 4),
        "baseline_scontrol_drain_p50_s": _pct(baseline, 50), "baseline_scontrol_drain_p99_s": _pct(baseline, 99),
        "goal_drain_accept_p99_s": GOAL_DRAIN_P99_S,
    }
    result["meets_goal"] = bool(result["drain_accept_p99_s"] <= GOAL_DRAIN_P99_S)
    result.update(_job_measures(slurm, work, checkpoints, requeues, progress))
    return result


def _job_measures(slurm: SlurmScheduler, work: Path, checkpoints: int, requeues: int,
                  progress: Callable[[str], None]) -> dict[str, Any]:
    progress_file = work / "progress"
    script = batch_script(sys.executable, str(work / "ack"), str(work / "ckpt"), str(progress_file), steps=100_000,
                          step_s=0.2)
    done = slurm.cli.complete("sbatch", "--parsable", "-N1", "-n2", "--requeue", "--open-mode=append",
                              "-o", str(work / "job.log"), str(_write(work / "job.sh", script)))
    if done.returncode != 0:
        raise ActuatorError(f"bench actuate: sbatch failed: {done.stderr.strip()}")
    job = done.stdout.strip().split(";")[0]

    def lines() -> list[list[str]]:
        return [line.split() for line in progress_file.read_text().splitlines()] if progress_file.exists() else []

    acks: list[float] = []
    saves: list[float] = []
    running: list[float] = []
    resumed: list[float] = []
    drained: list[str] = []
    try:
        progress("starting a 2-rank PyTorch job (gloo)")
        _until(lambda: len(lines()) >= 2 or _ended(slurm, job, work), 120, "the job to train")
        progress(f"checkpoint request -> acknowledgement, {checkpoints} times")
        for _ in range(checkpoints):
            started = time.monotonic()
            if not slurm.checkpoint(job):
                raise ActuatorError(f"bench actuate: job {job} did not acknowledge (see {work / 'job.log'})")
            acks.append(time.monotonic() - started)
            saves.append(slurm.acks[job].save_s)
        progress(f"requeue -> running again, {requeues} times")
        for restart in range(1, requeues + 1):
            current = slurm.job(job)
            assert current is not None
            slurm.drain(current.nodes[0], f"sentinel: bench-{restart} requeue")
            drained.append(current.nodes[0])
            started = time.monotonic()
            slurm.requeue(job)
            _until(lambda: _running_again(slurm, job, restart), 120, "the requeued job to run")  # noqa: B023
            running.append(time.monotonic() - started)
            _until(lambda: any(p[0] == str(restart) for p in lines()), 120, "training to resume")  # noqa: B023
            resumed.append(time.monotonic() - started)
            for node in drained:
                slurm.resume(node)
                _ready(slurm, node)
            drained.clear()
    finally:
        slurm.cli.complete("scancel", job)
        for node in drained:
            slurm.resume(node)
    return {
        "checkpoint_samples": len(acks),
        "checkpoint_ack_p50_s": _pct(acks, 50), "checkpoint_ack_p99_s": _pct(acks, 99),
        "checkpoint_save_p50_s": _pct(saves, 50),
        "requeue_samples": len(running),
        "requeue_running_p50_s": _pct(running, 50), "requeue_running_max_s": _pct(running, 100),
        "requeue_resumed_training_p50_s": _pct(resumed, 50),
    }


def _ready(slurm: SlurmScheduler, node: str) -> None:
    """Wait until a node we resumed answers again (Slurm shows it ``idle*`` for a moment after a resume), so no
    sample includes a node coming back."""
    _until(lambda: "NOT_RESPONDING" not in slurm.node(node).states, 30, f"{node} to answer after the resume")


def _running_again(slurm: SlurmScheduler, job: str, restarts: int) -> bool:
    found = slurm.job(job)
    return found is not None and found.state == "RUNNING" and found.restarts >= restarts


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def render_actuate(result: dict[str, Any]) -> str:
    rows = [
        {"measure": "decision -> drain accepted", "p50": result["drain_accept_p50_s"],
         "p99": result["drain_accept_p99_s"], "baseline": result["baseline_scontrol_drain_p50_s"]},
        {"measure": "checkpoint request -> ack", "p50": result["checkpoint_ack_p50_s"],
         "p99": result["checkpoint_ack_p99_s"], "baseline": result["checkpoint_save_p50_s"]},
        {"measure": "requeue -> running", "p50": result["requeue_running_p50_s"],
         "p99": result["requeue_running_max_s"], "baseline": None},
        {"measure": "requeue -> training resumed", "p50": result["requeue_resumed_training_p50_s"], "p99": None,
         "baseline": None},
    ]
    verdict = "meets" if result["meets_goal"] else "MISSES"
    return (render(rows, [("measure", "measure"), ("p50", "p50 s"), ("p99", "p99 s (max for requeue)"),
                          ("baseline", "baseline p50 s")])
            + "\n\nbaselines: a bare `scontrol update state=drain`; the job's own save time (DCP) for the ack."
            + f"\ndecision -> drain accepted p99 {result['drain_accept_p99_s']} s over {result['drain_samples']} "
              f"drains ({verdict} the goal of {GOAL_DRAIN_P99_S} s)")
