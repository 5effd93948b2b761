"""The whole in-process path — transport, detector, controller, policy, actuator, store — on real SQLite."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sentinel import codec
from sentinel.actuator.steps import DryRunActuator, SchedulerActuator
from sentinel.clock import ManualClock
from sentinel.config import Config, from_mapping
from sentinel.daemon import Pipeline, build_pipeline
from sentinel.events import (
    ActionKind,
    Command,
    GpuReading,
    GpuState,
    LogEvent,
    LogKind,
    TelemetrySample,
)
from sentinel.obs.metrics import Metrics
from sentinel.sim.scheduler import SimScheduler
from sentinel.store.repository import Repository
from sentinel.transport import LOGS, TELEMETRY

NODES = [f"gpu-node-{i:03d}" for i in range(1, 9)]


@dataclass
class Rig:
    pipeline: Pipeline
    scheduler: SimScheduler
    clock: ManualClock
    repo: Repository
    metrics: Metrics
    dbe: dict[str, int]

    def sample(self, node: str, temps: list[float] | None = None, lost: int | None = None, dbe: int = 0) -> None:
        temps = temps or [60.0] * 8
        gpus = [GpuReading(index=i, pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                           state=GpuState.LOST if i == lost else GpuState.OK,
                           temp_c=None if i == lost else t, ecc_dbe_volatile=dbe if i == 0 else 0)
                for i, t in enumerate(temps)]
        sample = TelemetrySample(node=node, ts=self.clock.now(), gpus=gpus)
        self.pipeline.transport.publish(TELEMETRY, node, codec.encode(sample))

    def xid(self, node: str, xid: int, gpu: int = 2) -> None:
        bus = f"0000:{0x18 + 0x10 * gpu:02X}:00"
        event = LogEvent(node=node, ts=self.clock.now(), kind=LogKind.XID, xid=xid, pci_bus_id=bus,
                         message=f"NVRM: Xid (PCI:{bus}): {xid}, pid=1, name=python, test")
        self.pipeline.transport.publish(LOGS, node, codec.encode(event))

    def tick(self, seconds: float = 10.0) -> None:
        self.clock.advance(seconds)
        for node in NODES:
            self.sample(node, dbe=self.dbe.get(node, 0))
        self.pipeline.pump()

    def executed(self) -> list[dict]:
        return [d for d in self.repo.table("decisions") if d["mode"] == "execute"]


def make_rig(repo: Repository, policy: dict | None = None, dry_run: bool = False,
             dbe: dict[str, int] | None = None) -> Rig:
    config: Config = from_mapping({"policy": {"mode": "act", "breaker": {"max_fraction": 0.5}, **(policy or {})}})
    clock = ManualClock()
    scheduler = SimScheduler(NODES, clock)
    for j in range(len(NODES) // 2):
        scheduler.submit(f"job-{j}", 2)
    metrics = Metrics()
    actuator = DryRunActuator(clock) if dry_run else SchedulerActuator(scheduler, clock)
    pipeline = build_pipeline(config, clock, metrics, repo, actuator=actuator)
    rig = Rig(pipeline, scheduler, clock, repo, metrics, dbe or {})
    rig.tick()  # every node known to the store: the breaker's fleet size
    return rig


def test_xid79_drains_the_node_and_requeues_its_job(repo: Repository) -> None:
    rig = make_rig(repo)
    job = rig.scheduler.jobs_on("gpu-node-003")[0]
    rig.xid("gpu-node-003", 79)
    rig.tick()
    assert (rig.scheduler.drain_reason("gpu-node-003") or "").startswith("sentinel: inc-gpu-node-003-")
    assert rig.scheduler.jobs_on("gpu-node-003") == []
    assert rig.scheduler.jobs[job].requeues == 1
    steps = {(r["step"], r["status"]) for r in repo.table("action_results")}
    assert {("drain", "ok"), ("requeue", "ok"), ("verify", "ok")} <= steps
    [incident] = repo.incidents()
    assert incident["status"] == "mitigated" and incident["node"] == "gpu-node-003"
    assert repo.drained_by("gpu-node-003") == incident["id"]


def test_benign_xid13_is_recorded_but_never_acted_on(repo: Repository) -> None:
    rig = make_rig(repo)
    for node in NODES[:4]:
        rig.xid(node, 13)
    rig.tick()
    findings = repo.table("findings")
    assert len(findings) == 4 and {f["severity"] for f in findings} == {"info"}
    assert repo.table("decisions") == [] and repo.incidents() == []
    assert all(rig.scheduler.drain_reason(n) is None for n in NODES)


def test_double_bit_ecc_counter_increase_drains_and_a_counter_reset_does_not(repo: Repository) -> None:
    rig = make_rig(repo, dbe={"gpu-node-002": 5, "gpu-node-005": 5})  # first sight: a baseline, not a delta
    assert repo.table("findings") == []
    rig.clock.advance(10)
    rig.sample("gpu-node-002", dbe=6)  # one new uncorrectable error
    rig.sample("gpu-node-005", dbe=0)  # the driver reloaded: counter went back to zero, not an error
    rig.pipeline.pump()
    assert rig.scheduler.drain_reason("gpu-node-002") is not None
    assert rig.scheduler.drain_reason("gpu-node-005") is None
    assert {f["node"] for f in repo.table("findings")} == {"gpu-node-002"}


def test_sustained_heat_checkpoints_the_job_before_draining(repo: Repository) -> None:
    rig = make_rig(repo)
    job = rig.scheduler.jobs_on("gpu-node-004")[0]
    for temp in (90.0, 93.5, 94.0, 95.0):
        rig.clock.advance(10)
        rig.sample("gpu-node-004", temps=[60.0] * 7 + [temp])
        rig.pipeline.pump()
    assert rig.scheduler.jobs[job].last_checkpoint_ts is not None
    assert rig.scheduler.drain_reason("gpu-node-004") is not None
    alert, decision = rig.executed()  # the first reading over 93 C alerts; sustained heat drains
    assert alert["action"] == ActionKind.ALERT.value
    assert decision["action"] == ActionKind.CHECKPOINT_DRAIN_REQUEUE.value
    checkpoint = [r for r in repo.table("action_results") if r["step"] == "checkpoint"]
    assert checkpoint[0]["status"] == "ok" and checkpoint[0]["job_ids"] == [job]


def test_observe_mode_records_the_decision_and_touches_nothing(repo: Repository) -> None:
    rig = make_rig(repo, policy={"mode": "observe"})
    rig.xid("gpu-node-001", 79)
    rig.tick()
    [decision, request] = sorted(repo.table("decisions"), key=lambda d: d["action"])
    assert request["action"] == "request_reboot" and request["mode"] == "observe"  # the operator queue
    assert decision["mode"] == "observe" and decision["blocked_by"] == ["observe_only"]
    assert repo.table("commands") == []
    assert rig.scheduler.drain_reason("gpu-node-001") is None
    assert rig.metrics.guard_blocks.labels("observe_only")._value.get() == 1


def test_opted_out_node_is_not_drained(repo: Repository) -> None:
    rig = make_rig(repo, policy={"opt_out_nodes": ["gpu-node-006"]})
    rig.xid("gpu-node-006", 48)
    rig.tick()
    assert rig.scheduler.drain_reason("gpu-node-006") is None
    assert [d["blocked_by"] for d in repo.table("decisions") if d["action"] == "drain_requeue"] == [["opt_out"]]


def test_breaker_opens_at_the_fleet_fraction_and_stays_open(repo: Repository) -> None:
    rig = make_rig(repo, policy={"breaker": {"max_fraction": 0.25, "window_s": 600}})  # 2 of 8 nodes
    for node in NODES[:4]:
        rig.xid(node, 79)
    rig.tick()
    drained = [n for n in NODES if rig.scheduler.drain_reason(n)]
    assert len(drained) == 2
    blocked = [d for d in repo.table("decisions") if "breaker" in d["blocked_by"]]
    assert len(blocked) == 2
    state = repo.load_breaker()
    assert state is not None and state.is_open
    rig.tick(seconds=3600)  # far past the window: it must not close by itself
    rig.xid(NODES[5], 79)
    rig.tick()
    assert rig.scheduler.drain_reason(NODES[5]) is None
    assert repo.load_breaker().is_open


def test_an_expired_command_is_not_carried_out(repo: Repository) -> None:
    rig = make_rig(repo)
    command = Command(id="inc-x:drain_requeue:cmd", decision_id="inc-x:drain_requeue", incident_id="inc-x",
                      node="gpu-node-001", action=ActionKind.DRAIN_REQUEUE, ts=rig.clock.now() - 600,
                      expires_ts=rig.clock.now() - 300, drain_reason="sentinel: inc-x test")
    results = SchedulerActuator(rig.scheduler, rig.clock).execute(command)
    assert [(r.step.value, r.status.value) for r in results] == [("verify", "failed")]
    assert "expired" in results[0].detail
    assert rig.scheduler.drain_reason("gpu-node-001") is None


def test_the_same_command_twice_changes_nothing_the_second_time(repo: Repository) -> None:
    rig = make_rig(repo)
    command = Command(id="inc-y:drain_requeue:cmd", decision_id="inc-y:drain_requeue", incident_id="inc-y",
                      node="gpu-node-001", action=ActionKind.DRAIN_REQUEUE, ts=rig.clock.now(),
                      expires_ts=rig.clock.now() + 300, drain_reason="sentinel: inc-y test")
    actuator = SchedulerActuator(rig.scheduler, rig.clock)
    first = actuator.execute(command)
    requeues = sum(j.requeues for j in rig.scheduler.jobs.values())
    second = actuator.execute(command)
    assert first[-1].status.value == "ok" and second[-1].status.value == "ok"
    assert [r.status.value for r in second if r.step.value == "drain"] == ["skipped"]
    assert sum(j.requeues for j in rig.scheduler.jobs.values()) == requeues


def test_dry_run_actuator_reports_and_never_touches_the_scheduler(repo: Repository) -> None:
    rig = make_rig(repo, dry_run=True)
    rig.xid("gpu-node-001", 79)
    rig.tick()
    assert {r["status"] for r in repo.table("action_results")} == {"dry_run"}
    assert all(rig.scheduler.drain_reason(n) is None for n in NODES)
    [command] = repo.table("commands")
    assert command["status"] == "done"


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 63, 68])
def test_application_xids_alone_never_drain(repo: Repository, xid: int) -> None:
    rig = make_rig(repo)
    rig.xid("gpu-node-001", xid)
    rig.tick()
    assert rig.executed() == []


def test_the_same_xid_from_kernel_log_and_nvml_yields_one_finding(repo: Repository) -> None:
    rig = make_rig(repo)
    rig.xid("gpu-node-001", 79)  # kernel log, PCI id only
    event = LogEvent(node="gpu-node-001", ts=rig.clock.now() + 1, kind=LogKind.XID, xid=79, gpu_index=2,
                     message="NVML Xid critical error event: Xid 79 on GPU 2", attrs={"source": "nvml"})
    rig.pipeline.transport.publish(LOGS, "gpu-node-001", codec.encode(event))
    rig.tick()
    assert [f["rule"] for f in repo.table("findings")] == ["xid-catalog"]
    rig.clock.advance(120)
    rig.xid("gpu-node-001", 79)  # minutes later: a new event, a new finding
    rig.tick()
    assert len(repo.table("findings")) == 2


def test_a_burst_of_benign_xid13_over_half_an_hour_never_reaches_a_drain_decision(repo: Repository) -> None:
    rig = make_rig(repo)
    for _ in range(180):
        for gpu in range(4):
            rig.xid("gpu-node-001", 13, gpu=gpu)
            rig.xid("gpu-node-001", 43, gpu=gpu)
        rig.tick()
    assert len(repo.table("findings")) >= 30  # recorded (deduplicated per minute), never acted on
    assert rig.executed() == [] and repo.incidents() == []
    assert rig.scheduler.drain_reason("gpu-node-001") is None


def test_the_configured_actuator_gets_the_services_metrics_and_cost_settings() -> None:
    """In production the actuator comes from ``actuator.kind``; it must count skipped checkpoints in the same
    registry the service exports (``sentinel_checkpoints_skipped_total`` never moved before)."""
    from sentinel.daemon import build_actuator

    config = from_mapping({"actuator": {"kind": "slurm"}})
    metrics = Metrics()
    actuator = build_actuator(config, ManualClock(), metrics)
    assert isinstance(actuator, SchedulerActuator)
    assert actuator.metrics is metrics and actuator.cost == config.policy.cost


@pytest.mark.parametrize(("line", "rule"), [
    ("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 24007, Fatal, Link 30 sourcetrack timeout error (First)",
     "nvswitch-sxid"),
    ("mlx5_core 0000:ab:00.0: poll_health:835:(pid 0): Fatal error 1 detected", "nic-fatal"),
    ("NVRM: GPU at PCI:0000:38:00: GPU-5f3e has fallen off the bus.", "xid-catalog"),
])
def test_a_fatal_nvswitch_nic_or_bus_line_drains_like_an_xid(repo: Repository, line: str, rule: str) -> None:
    """Issue 17: these lines were parsed (or not even that) but never reached a finding, so nothing acted."""
    from sentinel_collectors.kmsg import parse_line

    rig = make_rig(repo)
    event = parse_line(line, "gpu-node-006", rig.clock.now())
    assert event is not None
    for _ in range(2):  # drivers repeat lines: one finding
        rig.pipeline.transport.publish(LOGS, "gpu-node-006", codec.encode(event))
    rig.tick()
    findings = [f for f in repo.table("findings") if f["node"] == "gpu-node-006"]
    assert [f["rule"] for f in findings] == [rule] and findings[0]["severity"] == "fatal"
    assert (rig.scheduler.drain_reason("gpu-node-006") or "").startswith("sentinel: ")


def test_a_non_fatal_sxid_only_alerts(repo: Repository) -> None:
    from sentinel_collectors.kmsg import parse_line

    rig = make_rig(repo)
    line = "nvidia-nvswitch3: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error"
    event = parse_line(line, "gpu-node-007", rig.clock.now())
    assert event is not None
    rig.pipeline.transport.publish(LOGS, "gpu-node-007", codec.encode(event))
    rig.tick()
    [finding] = [f for f in repo.table("findings") if f["node"] == "gpu-node-007"]
    assert finding["severity"] == "warning" and "SXid 12028" in finding["summary"]
    assert rig.scheduler.drain_reason("gpu-node-007") is None
