"""GPU error-counter warnings (PCIe replays, NVLink CRC, row remap pending) judged on literal samples."""

from __future__ import annotations

from sentinel.events import (
    FindingClass,
    GpuReading,
    NvLinkReading,
    Recommendation,
    Severity,
    TelemetrySample,
)
from tests.rule_runs import run_rules


def _sample(ts: float, replay: int = 0, crc: tuple[int, int] = (0, 0), pending: bool = False) -> TelemetrySample:
    gpus = [GpuReading(index=i, temp_c=60.0, sm_clock_mhz=1980.0, util_gpu_pct=95.0, power_w=500.0,
                       pcie_replay=replay if i == 1 else 0, row_remap_pending=pending and i == 0,
                       nvlinks=[NvLinkReading(link=k, crc_errors=crc[k] if i == 2 else 0) for k in range(2)])
            for i in range(4)]
    return TelemetrySample(node="n1", ts=ts, gpus=gpus)


def test_pcie_replays_above_8_per_minute_warn_once_per_episode() -> None:
    # 2 replays per 10 s step = 12/min: over DCGM's 8/min from the first step that shows a rate
    found = run_rules([_sample(10.0 * k, replay=2 * k) for k in range(12)])
    [(ts, finding)] = found
    assert ts == 10.0 and finding.rule == "pcie-replay-rate" and finding.gpu_index == 1
    assert finding.kind is FindingClass.GPU_PCIE
    assert finding.severity is Severity.WARNING and finding.recommendation is Recommendation.ALERT
    assert finding.evidence["rate"] == 12.0 and finding.evidence["limit"] == 8.0


def test_pcie_replays_at_the_limit_or_below_do_not_warn() -> None:
    # 8 replays in the minute: at the limit, not above it
    assert run_rules([_sample(10.0 * k, replay=min(8, 4 * (k // 3))) for k in range(12)]) == []


def test_a_replay_counter_reset_is_not_a_burst() -> None:
    samples = [_sample(0.0, replay=5000), _sample(10.0, replay=5000), _sample(20.0, replay=0), _sample(30.0)]
    assert run_rules(samples) == []


def test_a_new_pcie_episode_warns_again_after_the_rate_falls_below_half_the_limit() -> None:
    counts = [0, 3, 6, 9, 9, 9, 9, 9, 9, 9, 9, 18, 27]  # a burst, a quiet minute, another burst (9 in 60 s)
    found = run_rules([_sample(10.0 * k, replay=c) for k, c in enumerate(counts)])
    assert [ts for ts, _ in found] == [10.0, 110.0]


def test_nvlink_crc_above_100_per_second_summed_over_links_warns() -> None:
    # links 0 and 1 add 600 + 600 errors per 10 s step: 120/s on GPU 2
    found = run_rules([_sample(10.0 * k, crc=(600 * k, 600 * k)) for k in range(4)])
    [(ts, finding)] = found
    assert ts == 10.0 and finding.rule == "nvlink-crc-rate" and finding.gpu_index == 2
    assert finding.kind is FindingClass.GPU_NVLINK and finding.evidence["rate"] == 120.0


def test_nvlink_crc_at_50_per_second_does_not_warn() -> None:
    assert run_rules([_sample(10.0 * k, crc=(250 * k, 250 * k)) for k in range(8)]) == []


def test_a_pending_row_remap_warns_once_and_again_after_it_cleared() -> None:
    flags = [False, True, True, True, False, True]
    found = run_rules([_sample(10.0 * k, pending=p) for k, p in enumerate(flags)])
    assert [(ts, f.rule, f.gpu_index) for ts, f in found] == [(10.0, "row-remap-pending", 0),
                                                             (50.0, "row-remap-pending", 0)]
    assert all(f.kind is FindingClass.GPU_ECC and f.recommendation is Recommendation.ALERT for _, f in found)
