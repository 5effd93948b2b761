"""The Kubernetes actuator through the official client over HTTP against the kmock emulator: cordon, taint,
annotate, evict (respecting disruption budgets), uncordon only what Sentinel cordoned."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sentinel import codec
from sentinel.actuator import JobTiming
from sentinel.actuator.kubernetes import KubernetesScheduler, build_api
from sentinel.actuator.steps import SchedulerActuator
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.config.actuation import KubernetesConfig
from sentinel.daemon import build_pipeline
from sentinel.errors import ActuatorError, ValidationError
from sentinel.events import ActionKind, Command, LogEvent, LogKind, StepStatus, TelemetrySample
from sentinel.obs.metrics import Metrics
from sentinel.store.repository import Repository
from sentinel.transport import LOGS, TELEMETRY
from tests.kmock_cluster import PODS, Cluster, running

REASON = "sentinel: inc-gpu-1-100 Xid 79: GPU fell off the bus"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from running(tmp_path)


class Waits:
    """The injected delay: records each wait and moves the manual clock instead of sleeping."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock, self.calls = clock, []  # type: ignore[var-annotated]

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        self.clock.advance(seconds)


def scheduler(cluster: Cluster, clock: ManualClock | None = None, **options: object) -> KubernetesScheduler:
    clock = clock or ManualClock()
    config = KubernetesConfig(kubeconfig=cluster.kubeconfig(), **options)  # type: ignore[arg-type]
    return KubernetesScheduler(build_api(config), config, clock, wait=Waits(clock))


def annotations(obj: dict | None) -> dict:
    assert obj is not None
    return obj["metadata"].get("annotations", {})


def test_drain_cordons_taints_and_annotates_the_node_and_only_its_pods(cluster: Cluster) -> None:
    cluster.add_node("gpu-1")
    cluster.add_pod("trainer-0", "gpu-1")
    cluster.add_pod("trainer-1", "gpu-2")
    s = scheduler(cluster)
    s.drain("gpu-1", REASON)
    node = cluster.node("gpu-1")
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [{"key": "sentinel.dev/failing", "value": "inc-gpu-1-100",
                                       "effect": "NoSchedule"}]
    drained_at = f"{s.clock.now():.0f}"  # auto-resume wants a boot after it
    assert annotations(node) == {"sentinel.dev/drain-reason": REASON, "sentinel.dev/incident": "inc-gpu-1-100",
                                 "sentinel.dev/cordoned": "true", "sentinel.dev/drained-at": drained_at}
    assert s.drained_since("gpu-1") == float(drained_at)
    assert annotations(cluster.pod("trainer-0"))["sentinel.dev/incident"] == "inc-gpu-1-100"
    assert "sentinel.dev/incident" not in annotations(cluster.pod("trainer-1"))
    assert s.drain_reason("gpu-1") == REASON


def test_jobs_are_the_nodes_own_pods_less_daemonsets_mirrors_and_finished_ones(cluster: Cluster) -> None:
    cluster.add_node("gpu-1")
    cluster.add_pod("trainer-0", "gpu-1")
    cluster.add_pod("other", "gpu-2")  # kmock ignores the field selector: filtered on our side
    cluster.add_pod("dcgm-exporter", "gpu-1", namespace="monitoring", owner="DaemonSet")
    cluster.add_pod("static", "gpu-1", annotations={"kubernetes.io/config.mirror": "x"})
    cluster.add_pod("done", "gpu-1", phase="Succeeded")
    assert scheduler(cluster).jobs_on("gpu-1") == ["train/trainer-0"]


def test_requeue_evicts_through_the_eviction_api_and_repeating_it_changes_nothing(cluster: Cluster) -> None:
    cluster.add_node("gpu-1")
    cluster.add_pod("trainer-0", "gpu-1")
    s = scheduler(cluster)
    s.requeue("train/trainer-0")
    assert cluster.evictions == ["train/trainer-0"] and cluster.pod("trainer-0") is None
    s.requeue("train/trainer-0")  # 404: already gone
    assert cluster.evictions == ["train/trainer-0"]
    assert s.jobs_on("gpu-1") == []


def test_an_eviction_a_budget_blocks_is_retried_with_backoff_until_allowed(cluster: Cluster) -> None:
    cluster.add_node("gpu-1")
    cluster.add_pod("trainer-0", "gpu-1")
    cluster.blocked["train/trainer-0"] = 2
    s = scheduler(cluster, eviction_backoff_s=1.5)
    s.requeue("train/trainer-0")
    assert s.wait.calls == [1.5, 3.0]  # type: ignore[attr-defined]
    assert cluster.pod("trainer-0") is None


def test_an_eviction_a_budget_keeps_blocking_is_reported_and_the_pod_stays(cluster: Cluster) -> None:
    cluster.add_node("gpu-1")
    cluster.add_pod("trainer-0", "gpu-1")
    cluster.blocked["train/trainer-0"] = -1
    s = scheduler(cluster, eviction_retries=3, eviction_backoff_s=20.0)
    with pytest.raises(ActuatorError, match="PodDisruptionBudget"):
        s.requeue("train/trainer-0")
    assert s.wait.calls == [20.0, 40.0, 60.0]  # type: ignore[attr-defined]  # doubling, capped at 60 s
    assert cluster.pod("trainer-0") is not None


def test_a_blocked_eviction_fails_the_command_with_the_reason(cluster: Cluster) -> None:
    cluster.add_node("gpu-1")
    cluster.add_pod("trainer-0", "gpu-1")
    cluster.blocked["train/trainer-0"] = -1
    clock = ManualClock()
    results = SchedulerActuator(scheduler(cluster, clock, eviction_retries=1), clock).execute(command(clock))
    assert results[-1].status is StepStatus.FAILED and "PodDisruptionBudget" in results[-1].detail
    assert cluster.node("gpu-1")["spec"]["unschedulable"] is True  # drained; the pod waits for its budget


def test_resume_lifts_only_our_cordon_and_taint(cluster: Cluster) -> None:
    admin_taint = {"key": "maintenance", "value": "disk", "effect": "NoSchedule"}
    cluster.add_node("ours")
    cluster.add_node("admins", unschedulable=True, taints=[admin_taint])
    s = scheduler(cluster)
    s.drain("ours", REASON)
    s.drain("admins", REASON)
    assert "sentinel.dev/cordoned" not in annotations(cluster.node("admins"))
    assert s.resume("ours") and s.resume("admins")
    ours, admins = cluster.node("ours"), cluster.node("admins")
    assert "unschedulable" not in ours["spec"] and "taints" not in ours["spec"]
    assert annotations(ours) == {}
    assert admins["spec"]["unschedulable"] is True and admins["spec"]["taints"] == [admin_taint]
    assert s.drain_reason("ours") is None and s.drained_since("ours") is None


def test_resume_refuses_a_node_sentinel_did_not_drain(cluster: Cluster) -> None:
    cluster.add_node("gpu-1", unschedulable=True)
    s = scheduler(cluster)
    assert s.drain_reason("gpu-1") == "cordoned (not by Sentinel)"
    assert not s.resume("gpu-1")
    assert cluster.node("gpu-1")["spec"]["unschedulable"] is True


def test_checkpoint_waits_for_the_pods_acknowledgement(cluster: Cluster) -> None:
    cluster.add_node("gpu-1")
    cluster.add_pod("acks", "gpu-1")
    cluster.add_pod("silent", "gpu-1")
    cluster.acking.add("train/acks")
    clock = ManualClock()
    s = scheduler(cluster, clock, checkpoint_timeout_s=10.0, checkpoint_poll_s=4.0)
    assert s.checkpoint("train/acks") is True and s.wait.calls == []  # type: ignore[attr-defined]
    assert s.checkpoint("train/silent") is False
    assert s.wait.calls == [4.0, 4.0, 4.0]  # type: ignore[attr-defined]
    assert "sentinel.dev/checkpoint-requested" in annotations(cluster.pod("silent"))


def test_job_timing_comes_from_the_pods_annotations(cluster: Cluster) -> None:
    cluster.add_node("gpu-1")
    cluster.add_pod("t", "gpu-1", annotations={"sentinel.dev/last-checkpoint-ts": "1000.5",
                                               "sentinel.dev/ends-ts": "junk"})
    cluster.add_pod("u", "gpu-1")
    s = scheduler(cluster)
    assert s.job_timing("train/t") == JobTiming(1000.5, None)
    assert s.job_timing("train/u") is None


@pytest.mark.parametrize("node", ["gpu-1; rm -rf /", "$(id)", "gpu-1\n", "../etc"])
def test_a_node_name_with_shell_metacharacters_is_refused_before_any_request(cluster: Cluster, node: str) -> None:
    s = scheduler(cluster)
    before = cluster.requests()
    for call in (s.jobs_on, s.drain_reason, s.resume, lambda n: s.drain(n, REASON)):
        with pytest.raises(ValidationError):
            call(node)
    with pytest.raises(ValidationError):
        s.requeue("train/x; reboot")
    assert cluster.requests() == before


def test_an_unreachable_api_server_is_an_actuator_error(tmp_path: Path) -> None:
    config = KubernetesConfig(kubeconfig=str(tmp_path / "absent"))
    with pytest.raises(ActuatorError, match="cannot load"):
        build_api(config)


def command(clock: ManualClock, node: str = "gpu-1") -> Command:
    return Command(id="inc-gpu-1-100:drain_requeue:cmd", decision_id="inc-gpu-1-100:drain_requeue",
                   incident_id="inc-gpu-1-100", node=node, action=ActionKind.DRAIN_REQUEUE, ts=clock.now(),
                   expires_ts=clock.now() + 300, drain_reason=REASON)


def test_a_command_drains_evicts_and_verifies_and_a_repeat_changes_nothing(cluster: Cluster) -> None:
    cluster.add_node("gpu-1")
    cluster.add_pod("trainer-0", "gpu-1")
    cluster.add_pod("trainer-1", "gpu-1")
    clock = ManualClock()
    actuator = SchedulerActuator(scheduler(cluster, clock), clock)
    first = actuator.execute(command(clock))
    assert [(r.step.value, r.status.value) for r in first] == [("drain", "ok"), ("requeue", "ok"), ("verify", "ok")]
    assert sorted(cluster.evictions) == ["train/trainer-0", "train/trainer-1"]
    second = actuator.execute(command(clock))
    assert [(r.step.value, r.status.value) for r in second] == [("drain", "skipped"), ("requeue", "skipped"),
                                                                ("verify", "ok")]
    assert len(cluster.evictions) == 2


def test_the_pipeline_configured_for_kubernetes_cordons_a_node_after_xid_79(cluster: Cluster,
                                                                           repo: Repository) -> None:
    nodes = [f"gpu-{i}" for i in range(1, 5)]
    for name in nodes:
        cluster.add_node(name)
        cluster.add_pod(f"trainer-{name}", name)
    config = from_mapping({"policy": {"mode": "act", "breaker": {"max_fraction": 0.5}},
                           "actuator": {"kind": "kubernetes", "kubernetes": {"kubeconfig": cluster.kubeconfig()}}})
    clock = ManualClock()
    pipeline = build_pipeline(config, clock, Metrics(), repo)
    for name in nodes:
        pipeline.transport.publish(TELEMETRY, name, codec.encode(TelemetrySample(node=name, ts=clock.now())))
    bus = "0000:18:00"
    pipeline.transport.publish(LOGS, "gpu-3", codec.encode(LogEvent(
        node="gpu-3", ts=clock.now(), kind=LogKind.XID, xid=79, pci_bus_id=bus,
        message=f"NVRM: Xid (PCI:{bus}): 79, pid=1, name=python, GPU has fallen off the bus.")))
    pipeline.pump()
    assert cluster.node("gpu-3")["spec"]["unschedulable"] is True
    assert cluster.evictions == ["train/trainer-gpu-3"]
    assert all("unschedulable" not in cluster.node(n)["spec"] for n in nodes if n != "gpu-3")
    assert {(r["step"], r["status"]) for r in repo.table("action_results")} >= {("drain", "ok"), ("verify", "ok")}


def test_checkpoints_that_buy_nothing_are_skipped_and_counted(cluster: Cluster) -> None:
    """Cost awareness: a job that saved a minute ago, or ends in two minutes, is moved without a checkpoint."""
    clock = ManualClock()
    now = clock.now()
    cluster.add_node("gpu-1")
    cluster.add_pod("fresh", "gpu-1", annotations={"sentinel.dev/last-checkpoint-ts": f"{now - 60:.0f}"})
    cluster.add_pod("ending", "gpu-1", annotations={"sentinel.dev/ends-ts": f"{now + 120:.0f}"})
    cluster.add_pod("stale", "gpu-1", annotations={"sentinel.dev/last-checkpoint-ts": f"{now - 7200:.0f}"})
    cluster.acking.add("train/stale")
    metrics = Metrics()
    actuator = SchedulerActuator(scheduler(cluster, clock), clock, cost=from_mapping({}).policy.cost,
                                 metrics=metrics)
    checkpoint_command = Command(**{**{f: getattr(command(clock), f) for f in Command.__struct_fields__},
                                    "action": ActionKind.CHECKPOINT_DRAIN_REQUEUE})
    [step, *_] = actuator.execute(checkpoint_command)
    assert step.step.value == "checkpoint" and step.status is StepStatus.OK
    assert step.job_ids == ["train/stale"]
    assert "train/fresh not checkpointed: checkpointed 60 s ago" in step.detail
    assert "train/ending not checkpointed: ends in 120 s" in step.detail
    fresh_versions = [dict(v) for v in cluster.km.objects[PODS, "train", "fresh"].history if v is not None]
    assert len(fresh_versions) >= 2  # created, then annotated with the incident at drain time
    assert all("sentinel.dev/checkpoint-requested" not in v["metadata"].get("annotations", {}) for v in fresh_versions)
    for reason in ("recent_checkpoint", "ends_soon"):
        assert metrics.registry.get_sample_value("sentinel_checkpoints_skipped_total", {"reason": reason}) == 1


def test_sentinel_resume_returns_a_kubernetes_node_through_the_configured_backend(cluster: Cluster, repo: Repository,
                                                                                   tmp_path: Path) -> None:
    """`sentinel resume NODE` goes through the scheduler registry: with actuator.kind = "kubernetes" it lifts our
    cordon and taint (before, it refused anything but Slurm)."""
    from sentinel.cli import main as cli

    cluster.add_node("gpu-7")
    scheduler(cluster).drain("gpu-7", REASON)
    path = tmp_path / "sentinel.toml"
    path.write_text(f'[actuator]\nkind = "kubernetes"\n[actuator.kubernetes]\nkubeconfig = "{cluster.kubeconfig()}"\n')
    assert cli.main(["resume", "gpu-7", "--config", str(path), "--db", str(repo.engine.url.database)]) == 0
    assert "unschedulable" not in cluster.node("gpu-7")["spec"] and annotations(cluster.node("gpu-7")) == {}


def test_the_scheduler_lists_the_nodes_it_manages(cluster: Cluster) -> None:
    """The breaker's fleet size comes from here, not from names on the telemetry topic (issue 19)."""
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        cluster.add_node(name)
    assert sorted(scheduler(cluster).node_names()) == ["gpu-1", "gpu-2", "gpu-3"]
