"""Host anomalies live: a node whose host metrics break from its own history gets an alert-only finding with the
metrics that moved, through the real detector; a restarted detector keeps the fitted state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sentinel import codec
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.config.detector import HostAnomalyConfig
from sentinel.daemon import Pipeline, build_pipeline
from sentinel.detector.host_anomaly import HostAnomaly
from sentinel.detector.host_rows import HOST_METRICS, RowBuilder, RowRing
from sentinel.detector.sample_view import view_of
from sentinel.errors import ConfigError
from sentinel.events import FindingClass, HostReading, NicReading, Recommendation, TelemetrySample
from sentinel.obs.metrics import Metrics
from sentinel.store.repository import Repository
from sentinel.transport import TELEMETRY

GIB = 1024**3
NODES = ("host-a", "host-b")


def _sample(node: str, ts: float, rng: np.random.Generator, broken: bool = False) -> TelemetrySample:
    cpu = 95.0 if broken else float(30.0 + 5.0 * np.sin(ts / 3600.0) + rng.normal(0, 1.0))
    load = 48.0 if broken else float(8.0 + rng.normal(0, 0.3))
    host = HostReading(boot_id="b", load1=round(load, 2), load5=round(load, 2), cpu_util_pct=round(cpu, 2),
                       mem_total_bytes=512 * GIB, mem_available_bytes=int((300 + float(rng.normal(0, 2))) * GIB),
                       disk_used_pct=41.0)
    return TelemetrySample(node=node, ts=ts, host=host)


class Rig:
    def __init__(self, repo: Repository, state_dir: Path, clock: ManualClock) -> None:
        config = from_mapping({"detector": {"host_anomaly": {"state_dir": str(state_dir), "warmup_s": 4 * 3600,
                                                             "history_s": 86_400}}})
        self.clock, self.repo = clock, repo
        self.pipeline: Pipeline = build_pipeline(config, clock, Metrics(), repo)
        self.rng = np.random.default_rng(7)

    def run(self, minutes: int, broken: str | None = None) -> None:
        for _ in range(minutes):
            self.clock.advance(60.0)
            for node in NODES:
                sample = _sample(node, self.clock.now(), self.rng, broken=node == broken)
                self.pipeline.transport.publish(TELEMETRY, node, codec.encode(sample))
        self.pipeline.pump()

    def host_findings(self) -> list[dict]:
        return [f for f in self.repo.table("findings") if f["rule"] == "host-anomaly"]

    @property
    def host(self) -> HostAnomaly:
        assert self.pipeline.detector.host is not None
        return self.pipeline.detector.host


def test_a_node_that_breaks_from_its_own_history_gets_an_alert_naming_the_metrics(repo: Repository,
                                                                                 tmp_path: Path) -> None:
    rig = Rig(repo, tmp_path, ManualClock(1_000_000.0))
    rig.run(5 * 60)  # past the four-hour warm-up: both nodes fitted
    assert all(rig.host.nodes[n].fit is not None for n in NODES)
    quiet = rig.host_findings()
    assert len(quiet) <= 1  # noise alone: about the budget of one a node-day (two nodes, one hour fitted)
    rig.run(10, broken="host-a")
    [finding] = rig.host_findings()[len(quiet):]
    assert finding["node"] == "host-a" and finding["kind"] == FindingClass.ANOMALY.value
    assert finding["recommendation"] == Recommendation.ALERT.value  # an alert, never a drain on its own
    evidence = finding["evidence"]
    assert {evidence["metric1"], evidence["metric2"]} <= {"cpu_util_pct", "load1", "load5"}
    assert evidence["score"] > evidence["threshold"]
    named = {evidence[f"metric{i}"]: evidence[f"metric{i}_value"] for i in (1, 2, 3)}
    assert named.get("cpu_util_pct", 95.0) == pytest.approx(95.0)
    assert not [d for d in repo.table("decisions") if d["action"] != "alert"]


def test_a_restarted_detector_resumes_fitted_and_still_finds_the_break(repo: Repository, tmp_path: Path) -> None:
    clock = ManualClock(1_000_000.0)
    first = Rig(repo, tmp_path, clock)
    first.run(5 * 60)
    fitted = first.host.nodes["host-a"].fit
    assert fitted is not None and (tmp_path / "host-a.npz").is_file()
    second = Rig(repo, tmp_path, clock)  # a new detector process: same state directory, nothing in memory
    second.run(1)
    resumed = second.host.nodes["host-a"].fit
    assert resumed is not None and resumed.fitted_ts == fitted.fitted_ts
    assert resumed.threshold == pytest.approx(fitted.threshold)
    np.testing.assert_allclose(resumed.model.tail, fitted.model.tail)
    assert second.host.kept("host-a") >= 4 * 60
    assert len(second.host.nodes["host-a"].history) < 60  # saved rows stay on disk, not in memory
    before = len(second.host_findings())
    second.run(10, broken="host-a")
    assert [f["node"] for f in second.host_findings()[before:]] == ["host-a"]


def test_rows_average_each_interval_and_turn_byte_counters_into_rates() -> None:
    builder = RowBuilder(60.0)
    nic = [NicReading(name="eth0", counters={"rx_bytes": 0, "tx_bytes": 0})]
    assert builder.add(view_of(TelemetrySample(node="n", ts=0.0, host=HostReading(load1=1.0), nics=nic))) is None
    nic = [NicReading(name="eth0", counters={"rx_bytes": 3000, "tx_bytes": 600}),
           NicReading(name="mlx5_0/1", link_layer="infiniband", counters={"port_xmit_data": 0})]
    assert builder.add(view_of(TelemetrySample(node="n", ts=30.0, host=HostReading(load1=3.0), nics=nic))) is None
    closed = builder.add(view_of(TelemetrySample(node="n", ts=61.0, host=HostReading(load1=9.0))))
    assert closed is not None
    end, row = closed
    assert end == 60.0 and row[HOST_METRICS.index("load1")] == 2.0
    rates = row[HOST_METRICS.index("net_rx_bytes_per_s"):]
    assert rates.tolist() == [100.0, 20.0]  # 3000 and 600 bytes in 30 s
    assert np.isnan(row[HOST_METRICS.index("disk_used_pct")])


def test_the_row_ring_keeps_the_newest_rows_in_order_as_it_grows_and_wraps() -> None:
    ring = RowRing(100, width=1)
    for i in range(250):
        ring.append(np.array([float(i)]))
    assert len(ring) == 100 and ring.rows()[:, 0].tolist() == [float(i) for i in range(150, 250)]


def test_a_node_without_the_host_collector_is_never_fitted_nor_saved(tmp_path: Path) -> None:
    host = HostAnomaly.from_config(HostAnomalyConfig(state_dir=str(tmp_path), warmup_s=3600.0))
    for minute in range(180):  # NIC counters alone (simulated fleets) do not make a host model
        nic = NicReading(name="mlx5_0/1", link_layer="infiniband", counters={"port_xmit_data": 1000 * minute})
        sample = TelemetrySample(node="bare", ts=60.0 * minute, nics=[nic])
        assert host.observe(view_of(sample), now=60.0 * minute) == []
    assert host.nodes["bare"].fit is None and len(host.nodes["bare"].history) == 0
    assert list(tmp_path.iterdir()) == []


def test_bad_host_anomaly_settings_name_their_path() -> None:
    with pytest.raises(ConfigError, match="detector.host_anomaly.warmup_s"):
        from_mapping({"detector": {"host_anomaly": {"warmup_s": 10}}})


def test_on_noise_alone_the_alert_rate_stays_near_the_budget_of_one_per_node_day() -> None:
    host = HostAnomaly.from_config(HostAnomalyConfig(state_dir=""))  # the defaults: a day's warm-up
    rng = np.random.default_rng(3)
    nodes, days = ("n0", "n1", "n2", "n3"), 3
    alerts = 0
    for minute in range(1, days * 1440 + 1):
        for node in nodes:
            alerts += len(host.observe(view_of(_sample(node, 60.0 * minute, rng)), now=60.0 * minute))
    assert all(host.nodes[n].fit is not None for n in nodes)
    assert alerts / (len(nodes) * (days - 1)) < 2.0  # fitted for the last two days


def test_rows_replayed_to_a_restarted_detector_are_not_added_to_the_saved_history_twice(tmp_path: Path) -> None:
    config = HostAnomalyConfig(state_dir=str(tmp_path), warmup_s=3600.0)
    rng = np.random.default_rng(1)
    samples = [_sample("n", 60.0 * minute, rng) for minute in range(1, 150)]
    before = HostAnomaly.from_config(config)
    for sample in samples:
        before.observe(view_of(sample), now=sample.ts)
    saved_rows = before.kept("n")
    assert before.nodes["n"].fit is not None and saved_rows >= 120
    after = HostAnomaly.from_config(config)
    for sample in samples[-30:]:  # a partition handed over: the last messages are read again
        after.observe(view_of(sample), now=sample.ts)
    np.testing.assert_array_equal(after.rows("n"), before.rows("n"))
