"""End to end on the real Slurm cluster: telemetry in, a real PyTorch job saved and moved; and a fault storm that
the circuit breaker stops.

The pipeline is the in-process one (``build_pipeline``) with ``policy.mode = "act"`` and the ``slurm`` actuator
from the registry, exactly as ``sentinel run`` builds it; only the telemetry is injected.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sentinel import codec
from sentinel.cli import main as cli
from sentinel.clock import Clock, ManualClock, SystemClock
from sentinel.config import from_mapping
from sentinel.daemon import Pipeline, build_pipeline
from sentinel.events import GpuReading, GpuState, TelemetrySample
from sentinel.hooks import ack
from sentinel.hooks.batch import batch_script
from sentinel.obs.metrics import Metrics
from sentinel.store.repository import Repository
from sentinel.transport import TELEMETRY
from tests.slurm_cluster import NODES, SlurmCluster, wait_for

STEP_S = 0.5  # one training step: the most work a requeue may lose


@dataclass
class Rig:
    pipeline: Pipeline
    clock: Clock

    def sample(self, node: str, temp_c: float = 60.0, lost_gpu: int | None = None) -> None:
        gpus = [GpuReading(index=i, temp_c=None if i == lost_gpu else (temp_c if i == 3 else 60.0),
                           state=GpuState.LOST if i == lost_gpu else GpuState.OK) for i in range(8)]
        sample = TelemetrySample(node=node, ts=self.clock.now(), gpus=gpus)
        self.pipeline.transport.publish(TELEMETRY, node, codec.encode(sample))

    def healthy_round(self) -> None:
        for node in NODES:
            self.sample(node)
        self.pipeline.pump()


def make_rig(slurm: SlurmCluster, repo: Repository, tmp_path: Path, clock: Clock, max_fraction: float) -> Rig:
    config = from_mapping({
        "policy": {"mode": "act", "breaker": {"max_fraction": max_fraction}},
        "actuator": {"kind": "slurm", "slurm": {"slurm_conf": slurm.conf, "ack_dir": str(tmp_path / "ack"),
                                                "ack_timeout_s": 30.0}},
    })
    rig = Rig(build_pipeline(config, clock, Metrics(), repo), clock)
    rig.healthy_round()  # every node known to the store: the breaker's fleet size
    return rig


def progress(tmp_path: Path) -> list[tuple[int, int, int]]:
    """(restart, step completed, step resumed from) lines rank 0 wrote."""
    path = tmp_path / "progress"
    lines = path.read_text().split("\n") if path.exists() else []
    return [(int(a), int(b), int(c)) for a, b, c in (line.split() for line in lines if line.count(" ") == 2)]


def test_a_hot_gpu_gets_the_job_checkpointed_drained_requeued_and_resumed(slurm: SlurmCluster, repo: Repository,
                                                                         tmp_path: Path) -> None:
    script = batch_script(sys.executable, str(tmp_path / "ack"), str(tmp_path / "ckpt"), str(tmp_path / "progress"),
                          step_s=STEP_S)
    job = slurm.submit(script, "-N1", "-n2", "--requeue", "--open-mode=append",
                       "-o", str(tmp_path / "job.log"))
    try:
        wait_for(lambda: len(progress(tmp_path)) >= 2, 60, "the job to train two steps")
        node = str(slurm.jobs()[job]["nodes"])
        rig = make_rig(slurm, repo, tmp_path, SystemClock(), max_fraction=0.25)
        for _ in range(3):  # the thermal rule wants 3 samples in a row at >= 93 C
            rig.sample(node, temp_c=95.0)
            rig.pipeline.pump()

        # the first reading over 93 C alerts (thermal-high); the third in a row checkpoints and drains
        alerts = [d for d in repo.table("decisions") if d["action"] == "alert"]
        decisions = [d for d in repo.table("decisions") if d["action"] != "alert"]
        assert [(d["node"], d["mode"]) for d in alerts] == [(node, "execute")]
        assert [(d["node"], d["action"], d["mode"]) for d in decisions] == [
            (node, "checkpoint_drain_requeue", "execute")]
        commands = repo.table("commands")
        assert [(c["node"], c["status"]) for c in commands] == [(node, "done")]
        steps = [(r["step"], r["status"], r["job_ids"]) for r in repo.table("action_results")]
        assert steps == [("checkpoint", "ok", [job]), ("drain", "ok", []), ("requeue", "ok", [job]),
                         ("verify", "ok", [])]
        assert repo.drained_by(node) == decisions[0]["incident_id"]  # incident mitigated, node held drained
        assert (slurm.drained(node) or "").startswith(f"sentinel: inc-{node}-")
        assert slurm.drained(node) == commands[0]["drain_reason"]
        saved = ack.read_ack(tmp_path / "ack", job)
        assert saved is not None and (Path(saved.checkpoint) / ".sentinel-complete").exists()

        def resumed() -> list[tuple[int, int, int]]:
            return [p for p in progress(tmp_path) if p[0] == 1]

        wait_for(resumed, 60, "the requeued job to train again")
        info = slurm.jobs()[job]
        assert info["job_state"] == "RUNNING" and info["nodes"] != node and info["restart_cnt"] == 1
        first_run = max(step for restart, step, _ in progress(tmp_path) if restart == 0)
        resumed_from = resumed()[0][2]
        assert resumed_from == saved.step
        assert first_run - resumed_from <= 1, f"lost {first_run - resumed_from} steps of {STEP_S} s"
    finally:
        slurm.run("scancel", job, check=False)


def test_a_storm_opens_the_breaker_which_stays_open_until_an_operator_resets_it(
        slurm: SlurmCluster, repo: Repository, tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    clock = ManualClock()
    rig = make_rig(slurm, repo, tmp_path, clock, max_fraction=0.25)  # 4 nodes: one per hour
    clock.advance(10)
    for node in NODES[:2]:  # half the fleet loses a GPU at once
        rig.sample(node, lost_gpu=5)
    rig.pipeline.pump()

    first = {d["node"]: d for d in _drain_decisions(repo)}
    assert sorted(d["mode"] for d in first.values()) == ["execute", "observe"]
    acted = next(n for n, d in first.items() if d["mode"] == "execute")
    held = next(n for n, d in first.items() if d["mode"] == "observe")
    assert first[held]["blocked_by"] == ["breaker"] and "breaker opened" in first[held]["reason"]
    assert (slurm.drained(acted) or "").startswith("sentinel:") and slurm.drained(held) is None
    assert repo.load_breaker().is_open  # type: ignore[union-attr]

    clock.advance(7200)  # past the window: a breaker never closes by itself
    rig.sample(NODES[2], lost_gpu=1)
    rig.pipeline.pump()
    later = [d for d in _drain_decisions(repo) if d["node"] == NODES[2]]
    assert [(d["mode"], d["blocked_by"]) for d in later] == [("observe", ["breaker"])]
    assert slurm.drained(NODES[2]) is None

    assert cli.main(["breaker", "reset", "--db", sqlite_url]) == 0
    assert not repo.load_breaker().is_open  # type: ignore[union-attr]
    rig.sample(NODES[3], lost_gpu=2)
    rig.pipeline.pump()
    after = [d for d in _drain_decisions(repo) if d["node"] == NODES[3]]
    assert [d["mode"] for d in after] == ["execute"]
    assert (slurm.drained(NODES[3]) or "").startswith(f"sentinel: inc-{NODES[3]}-")

    # After the repair the operator returns the node; only drains Sentinel wrote are resumed.
    monkeypatch.setenv("SENTINEL__ACTUATOR__KIND", "slurm")
    monkeypatch.setenv("SENTINEL__ACTUATOR__SLURM__SLURM_CONF", slurm.conf)
    assert cli.main(["resume", NODES[3], "--db", sqlite_url]) == 0
    assert slurm.drained(NODES[3]) is None and repo.open_incident(NODES[3]) is None
    slurm.run("scontrol", "update", f"nodename={held}", "state=drain", "reason=fan replaced (operator)")
    assert cli.main(["resume", held, "--db", sqlite_url]) == 1
    assert "refusing to resume" in capsys.readouterr().err
    assert slurm.drained(held) == "fan replaced (operator)"


def _drain_decisions(repo: Repository) -> list[dict]:
    """Decisions about draining (operator-queue requests, recorded beside them, are not what the breaker holds)."""
    return [d for d in repo.table("decisions") if not d["action"].startswith("request_")]
