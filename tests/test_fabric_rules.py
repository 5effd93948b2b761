"""InfiniBand and straggler rules judged on literal samples."""

from __future__ import annotations

from sentinel.events import GpuReading, NicReading, Recommendation, Severity, TelemetrySample
from tests.rule_runs import run_rules


def _sample(ts: float, clocks: list[float] | None = None, util: float = 95.0, symbol: int = 0, recovery: int = 0,
            downed: int = 0, reasons: list[int] | None = None) -> TelemetrySample:
    clocks = clocks or [1980.0] * 4
    reasons = reasons or [0] * len(clocks)
    gpus = [GpuReading(index=i, temp_c=60.0, sm_clock_mhz=c, util_gpu_pct=util, power_w=500.0,
                       throttle_reasons=r) for i, (c, r) in enumerate(zip(clocks, reasons, strict=True))]
    nic = NicReading(name="mlx5_0/1", link_layer="infiniband",
                     counters={"symbol_error": symbol, "link_error_recovery": recovery, "link_downed": downed})
    return TelemetrySample(node="n1", ts=ts, gpus=gpus, nics=[nic])


def test_an_increase_of_link_downed_is_fatal_and_drains() -> None:
    found = run_rules([_sample(0.0, downed=2), _sample(10.0, downed=2), _sample(20.0, downed=3)])
    [(ts, finding)] = found
    assert ts == 20.0 and finding.rule == "ib-link-downed"
    assert finding.severity is Severity.FATAL and finding.recommendation is Recommendation.DRAIN
    assert finding.evidence["delta"] == 1


def test_a_counter_reset_by_a_reboot_is_not_a_link_down() -> None:
    assert run_rules([_sample(0.0, downed=5), _sample(10.0, downed=0), _sample(20.0, downed=0)]) == []


def test_symbol_errors_above_120_per_hour_alone_alert_once() -> None:
    samples = [_sample(10.0 * k, symbol=3 * k) for k in range(20)]  # 1080 errors/h, 57 seen
    found = run_rules(samples)
    [(ts, finding)] = found
    assert finding.rule == "ib-link-degraded" and finding.recommendation is Recommendation.ALERT
    assert finding.severity is Severity.WARNING
    assert ts == 40.0  # the first sample with at least 10 errors seen
    assert finding.evidence["symbol_error_per_h"] == 1080.0


def test_symbol_errors_with_link_recoveries_escalate_to_a_checkpoint_and_drain() -> None:
    samples = [_sample(10.0 * k, symbol=3 * k, recovery=int(k >= 12)) for k in range(20)]
    found = run_rules(samples)
    assert [f.recommendation for _, f in found] == [Recommendation.ALERT, Recommendation.CHECKPOINT_DRAIN]
    assert found[1][0] == 120.0 and found[1][1].severity is Severity.CRITICAL


def test_a_few_symbol_errors_are_not_a_rate() -> None:
    samples = [_sample(10.0 * k, symbol=min(k, 5)) for k in range(20)]
    assert run_rules(samples) == []


def test_a_gpu_lagging_its_peers_two_samples_in_a_row_is_a_straggler() -> None:
    slow = [1980.0, 1980.0, 1188.0, 1980.0]
    found = run_rules([_sample(0.0), _sample(10.0, slow), _sample(20.0, slow), _sample(30.0, slow)])
    [(ts, finding)] = found
    assert ts == 20.0 and finding.rule == "straggler-clock" and finding.gpu_index == 2
    assert finding.recommendation is Recommendation.ALERT
    assert finding.evidence["ratio"] == 0.6 and finding.evidence["peer_median_mhz"] == 1980.0


def test_one_slow_sample_is_not_a_straggler() -> None:
    slow = [1980.0, 1980.0, 1188.0, 1980.0]
    assert run_rules([_sample(0.0), _sample(10.0, slow), _sample(20.0), _sample(30.0, slow)]) == []


def test_idle_gpus_at_different_clocks_are_not_stragglers() -> None:
    uneven = [345.0, 345.0, 210.0, 345.0]
    assert run_rules([_sample(float(t), uneven, util=0.0) for t in range(0, 50, 10)]) == []


def test_a_straggler_recovers_and_can_be_reported_again() -> None:
    slow = [1980.0, 1980.0, 1188.0, 1980.0]
    samples = [_sample(0.0, slow), _sample(10.0, slow), _sample(20.0), _sample(30.0, slow), _sample(40.0, slow)]
    assert [ts for ts, _ in run_rules(samples)] == [10.0, 40.0]


def test_nodes_without_gpu_peers_or_with_a_gpu_missing_readings_judge_what_is_there() -> None:
    """A node with no GPU or one GPU has no peers; a GPU without a clock or utilisation reading is left out and
    the others are still compared (the rule's fast path reads every GPU at once and falls back for these)."""
    assert run_rules([TelemetrySample(node="n1", ts=float(t), gpus=[]) for t in range(3)]) == []
    assert run_rules([TelemetrySample(node="n1", ts=float(t), gpus=[GpuReading(index=0, sm_clock_mhz=900.0,
                                                                                util_gpu_pct=99.0)])
                      for t in range(3)]) == []
    gpus = [GpuReading(index=i, sm_clock_mhz=clock, util_gpu_pct=99.0) for i, clock in
            enumerate([1980.0, 1980.0, 1188.0])] + [GpuReading(index=3, util_gpu_pct=99.0)]  # no clock read
    found = run_rules([TelemetrySample(node="n1", ts=float(t), gpus=gpus) for t in range(3)])
    assert [(f.rule, f.gpu_index) for _, f in found] == [("straggler-clock", 2)]


SLOW = [1980.0, 1980.0, 1188.0, 1980.0]


def test_a_gpu_slowed_by_a_power_brake_or_cap_is_capped_not_a_straggler() -> None:
    """NVML's HW power brake (0x80) and SW power cap (0x4) say the rack's or job's power envelope set the clock."""
    for reason in (0x80, 0x4, 0x80 | 0x8):
        braked = [_sample(10.0 * k, SLOW, reasons=[0, 0, reason, 0]) for k in range(40)]
        assert run_rules(braked) == []


def test_a_gpu_slowed_by_its_own_heat_is_still_a_straggler() -> None:
    hot = [_sample(10.0 * k, SLOW, reasons=[0, 0, 0x40, 0]) for k in range(3)]
    [(_, finding)] = run_rules(hot)
    assert finding.gpu_index == 2 and finding.evidence["thermal_throttle"] is True


def test_a_straggler_is_found_on_a_lightly_loaded_job_whose_peers_wait_for_it() -> None:
    """Peers of a slow GPU idle at every collective: a job held back runs them at 20-60 % utilisation."""
    found = run_rules([_sample(10.0 * k, SLOW, util=30.0) for k in range(3)])
    assert [(ts, f.gpu_index) for ts, f in found] == [(10.0, 2)]


def test_a_straggler_that_lasts_is_confirmed_with_how_long_it_lasted_and_asks_to_be_removed() -> None:
    found = run_rules([_sample(10.0 * k, SLOW) for k in range(40)])
    assert [(ts, f.rule, f.evidence["duration_s"]) for ts, f in found] == [
        (10.0, "straggler-clock", 10.0), (300.0, "straggler-confirmed", 300.0)]
    first, confirmed = (f for _, f in found)
    assert first.severity is Severity.WARNING and first.recommendation is Recommendation.ALERT
    assert confirmed.severity is Severity.CRITICAL and confirmed.recommendation is Recommendation.CHECKPOINT_DRAIN
    assert confirmed.evidence["ratio"] == 0.6 and "confirmed" in confirmed.summary


def test_a_power_capping_episode_across_the_node_confirms_no_straggler() -> None:
    """The power envelope caps every GPU (SW power cap 0x4), one more than the others: capped, not slow."""
    capped = [_sample(10.0 * k, [1500.0, 1500.0, 990.0, 1500.0], reasons=[0x4] * 4) for k in range(60)]
    assert run_rules(capped) == []
