"""Findings are evidence, alerts are for people: grading per rule (persists, repeats, corroborated), one alert per
node episode, resolution when the episode ends, and a flapping node held rather than paged again. The grading is
pure (literals); the episode tests run the real controller on a real SQLite store."""

from __future__ import annotations

from typing import Any

from sentinel.actuator.sealed import Sealer
from sentinel.actuator.signing import CommandSigner, process_key
from sentinel.alerts.grading import grade
from sentinel.clock import ManualClock
from sentinel.config import AlertsConfig, from_mapping
from sentinel.controller.service import Controller
from sentinel.events import EvidenceValue, Finding, FindingClass, Recommendation, Severity
from sentinel.obs.metrics import Metrics
from sentinel.store.repository import Repository
from sentinel.transport import FINDINGS
from sentinel.transport.memory import MemoryTransport

T0 = 1_767_225_600.0
RULE_KIND = {"pcie-replay-rate": FindingClass.GPU_PCIE, "nvlink-crc-rate": FindingClass.GPU_NVLINK,
             "hazard-model": FindingClass.PREDICTED_FAILURE, "peer-outlier": FindingClass.ANOMALY,
             "isolation-forest": FindingClass.ANOMALY, "straggler-clock": FindingClass.STRAGGLER,
             "row-remap-pending": FindingClass.GPU_ECC, "xid-catalog": FindingClass.GPU_XID,
             "thermal-sustained": FindingClass.GPU_THERMAL}


def finding(rule: str, t: float, gpu: int | None = 0, node: str = "gpu-node-001", severity: Severity =
            Severity.WARNING, **evidence: EvidenceValue) -> Finding:
    rec = Recommendation.ALERT if severity is Severity.WARNING else Recommendation.CHECKPOINT_DRAIN
    return Finding(id=f"{rule}:{node}:{gpu}:{t:.0f}", node=node, ts=t, observed_ts=t, kind=RULE_KIND[rule],
                   rule=rule, severity=severity, recommendation=rec, confidence=0.9, summary=f"{rule} on GPU {gpu}",
                   gpu_index=gpu, evidence=evidence)


def test_a_lone_counter_warning_stays_evidence() -> None:
    f = finding("pcie-replay-rate", T0)
    assert grade(f, [f], AlertsConfig()) is None


def test_a_counter_warning_that_repeats_three_times_on_one_gpu_within_a_day_alerts() -> None:
    history = [finding("pcie-replay-rate", T0 + k * 3600) for k in range(3)]
    assert grade(history[-1], history, AlertsConfig()) == "repeats: pcie-replay-rate 3 times within 24 h"
    assert grade(history[1], history[:2], AlertsConfig()) is None


def test_repeats_on_other_gpus_or_outside_the_window_do_not_count() -> None:
    spread = [finding("pcie-replay-rate", T0, gpu=0), finding("pcie-replay-rate", T0 + 60, gpu=1),
              finding("pcie-replay-rate", T0 + 120, gpu=0)]
    assert grade(spread[-1], spread, AlertsConfig()) is None
    old = [finding("pcie-replay-rate", T0 - 2 * 86_400), finding("pcie-replay-rate", T0 - 3600),
           finding("pcie-replay-rate", T0)]
    assert grade(old[-1], old, AlertsConfig()) is None


def test_a_second_physical_signal_on_the_same_gpu_corroborates() -> None:
    first = finding("pcie-replay-rate", T0)
    second = finding("nvlink-crc-rate", T0 + 600)
    assert grade(second, [first, second], AlertsConfig()) == "corroborated: nvlink-crc-rate and pcie-replay-rate"
    elsewhere = finding("nvlink-crc-rate", T0 + 600, gpu=3)
    assert grade(elsewhere, [first, elsewhere], AlertsConfig()) is None
    late = finding("nvlink-crc-rate", T0 + 7200)
    assert grade(late, [first, late], AlertsConfig()) is None


def test_the_model_corroborates_a_physical_signal_but_model_and_peers_do_not_corroborate_each_other() -> None:
    physical = finding("pcie-replay-rate", T0)
    model = finding("hazard-model", T0 + 300)
    assert grade(model, [physical, model], AlertsConfig()) is not None
    peers = finding("peer-outlier", T0 + 400, gpu=None)
    assert grade(peers, [model, peers], AlertsConfig()) is None
    anomaly = finding("isolation-forest", T0 + 500)
    assert grade(anomaly, [model, anomaly], AlertsConfig()) is None


def test_two_faces_of_one_hbm_event_are_one_signal() -> None:
    """A successful row remap logs Xid 63 and sets the pending flag: the same event, not two that agree."""
    xid = finding("xid-catalog", T0, xid=63)
    pending = finding("row-remap-pending", T0 + 10)
    assert grade(pending, [xid, pending], AlertsConfig()) is None


def test_a_straggler_alerts_only_once_it_persists() -> None:
    start = finding("straggler-clock", T0, duration_s=20.0)
    assert grade(start, [start], AlertsConfig()) is None
    lasting = finding("straggler-clock", T0 + 300, duration_s=300.0)
    assert grade(lasting, [start, lasting], AlertsConfig()) == "persists: straggler-clock for 300 s"


def test_critical_and_fatal_findings_alert_at_once() -> None:
    f = finding("thermal-sustained", T0, severity=Severity.CRITICAL)
    assert grade(f, [f], AlertsConfig()) == "critical: thermal-sustained"


def test_a_site_can_grade_a_rule_its_own_way() -> None:
    config = from_mapping({"alerts": {"rules": {"pcie-replay-rate": {"repeat": 1}}}}).alerts
    f = finding("pcie-replay-rate", T0)
    assert grade(f, [f], config) is not None


class Rig:
    """The real controller on a real store, fed findings on the memory transport."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo
        self.clock = ManualClock(T0)
        self.transport = MemoryTransport(10_000)
        config = from_mapping({})
        self.metrics = Metrics()
        self.controller = Controller(self.transport, repo, config.policy, self.metrics, self.clock,
                                     signer=CommandSigner(process_key()), alerts=config.alerts)

    def feed(self, rule: str, gpu: int | None = 0, **evidence: Any) -> None:
        f = finding(rule, self.clock.now(), gpu, **evidence)
        self.transport.publish(FINDINGS, f.node, Sealer(process_key(), Finding).seal(f))
        self.controller.step()

    def wait(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.controller.step()

    def alerts(self) -> list[dict[str, Any]]:
        return [i for i in self.repo.table("incidents", order_by="opened_ts") if i["alert_ts"] is not None]

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels or None)


def test_one_node_episode_is_one_alert_however_many_findings_it_collects(repo: Repository) -> None:
    rig = Rig(repo)
    for _ in range(3):
        rig.feed("pcie-replay-rate")
        rig.wait(600)
    assert len(rig.alerts()) == 1 and rig.alerts()[0]["alert_reason"].startswith("repeats: pcie-replay-rate")
    rig.feed("nvlink-crc-rate")
    rig.feed("hazard-model")
    assert len(rig.alerts()) == 1
    assert len(repo.table("findings")) == 5
    assert rig.sample("sentinel_alerts_total", kind="gpu_pcie") == 1
    assert rig.sample("sentinel_node_alert", node="gpu-node-001", kind="gpu_pcie") == 1


def test_findings_that_never_grade_open_no_alert(repo: Repository) -> None:
    rig = Rig(repo)
    rig.feed("pcie-replay-rate")
    rig.wait(7200)
    rig.feed("straggler-clock", duration_s=20.0)
    assert rig.alerts() == [] and len(repo.table("incidents", order_by="opened_ts")) == 2
    assert repo.incidents(alerts_only=True) == [] and len(repo.incidents()) == 2


def test_an_alert_resolves_when_its_episode_goes_quiet(repo: Repository) -> None:
    rig = Rig(repo)
    rig.feed("straggler-clock", duration_s=400.0)
    assert rig.sample("sentinel_node_alert", node="gpu-node-001", kind="straggler") == 1
    rig.wait(3700)
    rig.wait(61)  # the sweep runs at most once a minute
    assert rig.alerts()[0]["status"] == "resolved"
    assert rig.sample("sentinel_node_alert", node="gpu-node-001", kind="straggler") is None


def test_a_flapping_node_is_held_not_paged_again(repo: Repository) -> None:
    rig = Rig(repo)
    rig.feed("straggler-clock", duration_s=400.0)
    rig.wait(3700)
    rig.wait(61)
    rig.wait(600)  # its alert ended ten minutes ago
    rig.feed("straggler-clock", duration_s=400.0)
    first, second = rig.alerts()
    assert not first["alert_held"] and second["alert_held"] and "flapping" in second["alert_reason"]
    assert rig.sample("sentinel_alerts_total", kind="straggler") == 1
    assert rig.sample("sentinel_alerts_held_total") == 1
    rig.wait(3700)
    rig.wait(61)
    rig.wait(3700)  # quiet for well over alerts.flap_hold_s: the next one is a new alert
    rig.feed("straggler-clock", duration_s=400.0)
    assert not rig.alerts()[-1]["alert_held"] and rig.sample("sentinel_alerts_total", kind="straggler") == 2


def test_a_redelivered_finding_does_not_alert_twice(repo: Repository) -> None:
    rig = Rig(repo)
    f = finding("thermal-sustained", rig.clock.now(), severity=Severity.CRITICAL)
    for _ in range(2):
        rig.transport.publish(FINDINGS, f.node, Sealer(process_key(), Finding).seal(f))
        rig.controller.step()
    assert len(rig.alerts()) == 1 and rig.sample("sentinel_alerts_total", kind="gpu_thermal") == 1


def test_the_model_does_not_corroborate_a_node_wide_signal_it_reads_itself() -> None:
    """The model's features carry the node's InfiniBand counters on every GPU: model + link warning is one signal."""
    link = finding("pcie-replay-rate", T0, gpu=None)
    link = Finding(**{**{f: getattr(link, f) for f in link.__struct_fields__}, "rule": "ib-link-degraded",
                      "kind": FindingClass.NIC_INFINIBAND, "id": "ib"})
    model = finding("hazard-model", T0 + 60, gpu=2)
    assert grade(model, [link, model], AlertsConfig()) is None
    peers = finding("peer-outlier", T0 + 60, gpu=None)
    assert grade(peers, [link, peers], AlertsConfig()) == "corroborated: peer-outlier and ib-link-degraded"
