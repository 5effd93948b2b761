"""The link rules (issue 36): NVLink replays/recoveries with CRC errors, PCIe downtraining with replays. One signal
alerts; two agreeing signals of the same link ask for a checkpoint and a drain; a lone link retrain or a CRC burst
alone never does."""

from __future__ import annotations

from sentinel.events import FindingClass, GpuReading, NvLinkReading, Recommendation, Severity, TelemetrySample
from tests.rule_runs import run_rules


def _sample(ts: float, crc: int = 0, replay: int = 0, recovery: int = 0, width: int | None = 16,
            pcie_replay: int = 0) -> TelemetrySample:
    gpus = [GpuReading(index=i, temp_c=60.0, sm_clock_mhz=1980.0, util_gpu_pct=95.0, power_w=500.0,
                       pcie_replay=pcie_replay if i == 3 else 0,
                       pcie_link_width=width if i == 3 else 16, pcie_link_width_max=16,
                       nvlinks=[NvLinkReading(link=k, crc_errors=crc if (i, k) == (2, 1) else 0,
                                              replay_errors=replay if (i, k) == (2, 1) else 0,
                                              recovery_errors=recovery if (i, k) == (2, 0) else 0)
                                for k in range(2)])
            for i in range(4)]
    return TelemetrySample(node="n1", ts=ts, gpus=gpus)


def _rules(found: list) -> list[tuple[float, str, int | None]]:
    return [(ts, f.rule, f.gpu_index) for ts, f in found if f.rule.startswith(("nvlink-link", "pcie-link"))]


def test_crc_errors_with_replays_on_the_same_gpu_ask_for_a_checkpoint_and_a_drain() -> None:
    # CRC errors climb from the first step (2 per 10 s, far below DCGM's 100/s); replays join from the fourth
    samples = [_sample(10.0 * k, crc=2 * k, replay=max(0, k - 3)) for k in range(10)]
    found = run_rules(samples)
    assert _rules(found) == [(40.0, "nvlink-link-degraded", 2), (50.0, "nvlink-link-failing", 2)]
    failing = next(f for _, f in found if f.rule == "nvlink-link-failing")
    assert failing.kind is FindingClass.GPU_NVLINK and failing.severity is Severity.CRITICAL
    assert failing.recommendation is Recommendation.CHECKPOINT_DRAIN
    assert failing.evidence["nvlink_replays_recoveries"] == 2 and failing.evidence["nvlink_crc_errors"] == 10
    degraded = next(f for _, f in found if f.rule == "nvlink-link-degraded")
    assert degraded.recommendation is Recommendation.ALERT and degraded.severity is Severity.WARNING


def test_a_link_that_retrains_once_and_stays_up_only_alerts() -> None:
    samples = [_sample(10.0 * k, recovery=1 if k >= 3 else 0) for k in range(12)]
    assert _rules(run_rules(samples)) == [(30.0, "nvlink-link-degraded", 2)]


def test_a_retrain_during_a_crc_burst_is_still_one_signal() -> None:
    samples = [_sample(10.0 * k, crc=50 * k, recovery=1 if k >= 3 else 0) for k in range(12)]
    assert [r for _, r, _ in _rules(run_rules(samples))] == ["nvlink-link-degraded"]


def test_a_crc_burst_alone_is_not_a_link_rule() -> None:
    assert _rules(run_rules([_sample(10.0 * k, crc=30 * k) for k in range(12)])) == []


def test_a_downtrained_pcie_link_alerts_and_with_replays_asks_for_a_drain() -> None:
    samples = [_sample(10.0 * k, width=8 if k >= 2 else 16, pcie_replay=k if k >= 5 else 0) for k in range(12)]
    assert _rules(run_rules(samples)) == [(20.0, "pcie-link-degraded", 3), (50.0, "pcie-link-failing", 3)]
    failing = next(f for _, f in run_rules(samples) if f.rule == "pcie-link-failing")
    assert failing.kind is FindingClass.GPU_PCIE and failing.recommendation is Recommendation.CHECKPOINT_DRAIN
    assert failing.evidence["pcie_downtrained"] is True and failing.evidence["pcie_replays"] == 5


def test_pcie_replays_on_a_full_width_link_are_not_a_link_rule_and_an_unknown_width_is_not_downtrained() -> None:
    assert _rules(run_rules([_sample(10.0 * k, pcie_replay=k) for k in range(12)])) == []
    assert _rules(run_rules([_sample(10.0 * k, width=None, pcie_replay=k) for k in range(12)])) == []


def test_an_episode_ends_when_its_signals_leave_the_window_and_a_new_one_alerts_again() -> None:
    # window_samples = 60 by default: a retrain at step 3, quiet until step 70, another at step 71
    samples = [_sample(10.0 * k, recovery=(1 if k >= 3 else 0) + (1 if k >= 71 else 0)) for k in range(75)]
    assert [ts for ts, _, _ in _rules(run_rules(samples))] == [30.0, 710.0]
