"""Window features judged on literal arrays, and the detector's window producing the same arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sentinel.counters import counter_increase, rate_per_h
from sentinel.detector.hazard_scoring import stack_series
from sentinel.detector.sample_view import view_of
from sentinel.detector.windows import NodeWindow
from sentinel.events import GpuReading, GpuState, NicReading, NvLinkReading, TelemetrySample
from sentinel_models.features import (
    FEATURES,
    SPREAD_FLOOR,
    DeviationBaseline,
    FleetScale,
    gpu_features,
    slope_per_min,
)

NAN = math.nan


def col(name: str) -> int:
    return FEATURES.index(name)


def test_counter_increase_counts_a_reset_and_a_gap_as_no_increase() -> None:
    values = np.array([10.0, 12.0, 3.0, NAN, 7.0, 9.0])
    assert counter_increase(values).tolist() == [2.0, 0.0, 0.0, 0.0, 2.0]


def test_rate_per_hour_over_the_window_and_over_its_last_steps() -> None:
    ts = np.array([0.0, 10.0, 20.0, 30.0])
    values = np.array([0.0, 0.0, 1.0, 3.0])
    assert rate_per_h(values, ts) == pytest.approx(3 * 3600 / 30)
    assert rate_per_h(values, ts, last=1) == pytest.approx(2 * 3600 / 10)


def test_slope_is_per_minute_and_skips_missing_readings() -> None:
    ts = np.array([0.0, 30.0, 60.0, 90.0])
    temps = np.array([[50.0, 70.0], [51.0, NAN], [52.0, 70.0], [53.0, 70.0]])
    assert slope_per_min(temps, ts).tolist() == pytest.approx([2.0, 0.0])


def test_slope_of_a_single_reading_is_zero() -> None:
    assert slope_per_min(np.array([[NAN], [40.0]]), np.array([0.0, 10.0])).tolist() == [0.0]


def _series() -> dict[str, np.ndarray]:
    ts = np.array([0.0, 60.0, 120.0, 180.0])
    two = np.ones((4, 3))
    return {
        "ts": ts,
        "temp_c": np.array([[60.0, 61.0, 70.0], [60.0, 61.0, 75.0], [60.0, 61.0, 80.0], [60.0, 61.0, 85.0]]),
        "power_w": two * [600.0, 610.0, 400.0],
        "sm_clock_mhz": two * [1980.0, 1980.0, 990.0],
        "util_pct": two * 95.0,
        "ecc_sbe": np.array([[0.0, 5.0, 0.0], [0.0, 5.0, 2.0], [0.0, 5.0, 4.0], [0.0, 5.0, 10.0]]),
        "pcie_replay": two * 0.0,
        "nvlink_crc": np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 6.0, 0.0]]),
        "nvlink_replay": np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 3.0, 0.0]]),
        "remap_pending": two * [0.0, 0.0, 1.0],
        "pcie_downtrained": np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [NAN, 0.0, 1.0]]),
        "throttle": np.array([[0, 0, 0], [0, 0, 0x40], [0, 0, 0x40], [0, 0, 0x40]]),
        "ib_symbol_error": np.array([0.0, 10.0, 20.0, 30.0]),
        "ib_link_error_recovery": np.array([0.0, 0.0, 0.0, 0.0]),
        "ib_link_downed": np.zeros(4),
    }


def test_gpu_features_of_a_literal_window() -> None:
    x = gpu_features(_series(), np.array([86_400.0, 86_400.0, 300.0]))
    assert x.shape == (3, len(FEATURES))
    # the node's level: the median of its GPUs' means of their newest readings (77.5, not the last 85.0)
    assert x[:, col("node_temp_c")].tolist() == [61.0, 61.0, 61.0]
    assert x[2, col("temp_dev_slope_per_min")] == pytest.approx(5.0)  # its peers stay flat
    # against the median of the node's GPUs (no baseline subtracted yet: see DeviationBaseline)
    assert x[:, col("temp_dev_excess")].tolist() == [-1.0, 0.0, 16.5]
    assert x[:, col("power_dev_excess")].tolist() == [0.0, 10.0, -200.0]
    assert x[:, col("clock_ratio")].tolist() == [1.0, 1.0, 0.5]
    assert x[:, col("ecc_sbe_per_h")].tolist() == pytest.approx([0.0, 0.0, 10 * 3600 / 180])
    assert x[2, col("ecc_sbe_recent_per_h")] == pytest.approx(6 * 3600 / 60)  # last quarter: one step
    assert x[:, col("remap_pending")].tolist() == [0.0, 0.0, 1.0]
    assert x[1, col("nvlink_crc_recent_per_h")] == pytest.approx(6 * 3600 / 60)
    assert x[:, col("nvlink_replay_per_h")].tolist() == pytest.approx([0.0, 3 * 3600 / 180, 0.0])
    assert x[:, col("pcie_downtrained")].tolist() == [0.0, 0.0, 1.0]  # the newest reading; unknown reads 0
    assert x[:, col("thermal_throttle_share")].tolist() == [0.0, 0.0, 0.75]
    assert x[:, col("ib_symbol_error_per_h")].tolist() == pytest.approx([600.0] * 3)  # the node's, on every GPU
    assert x[:, col("xid_precursor_age_s")].tolist() == [86_400.0, 86_400.0, 300.0]


def _devs(temp: list[float], power: list[float]) -> np.ndarray:
    x = np.zeros((len(temp), len(FEATURES)))
    x[:, col("temp_dev_excess")], x[:, col("power_dev_excess")] = temp, power  # raw, as gpu_features gives
    return x


def test_a_gpu_that_always_runs_warm_is_ordinary_against_its_own_baseline() -> None:
    baseline = DeviationBaseline(tau_s=3600.0)
    first = baseline.apply(_devs([5.0, 0.0], [30.0, 0.0]), 0.0)  # the first reading is the baseline
    assert first[:, col("temp_dev_excess")].tolist() == [0.0, 0.0]
    later = baseline.apply(_devs([5.0, 0.0], [30.0, 0.0]), 600.0)
    assert later[:, col("temp_dev_excess")].tolist() == [0.0, 0.0]


def test_a_gpu_leaving_its_baseline_shows_an_excess_that_the_baseline_follows_slowly() -> None:
    baseline = DeviationBaseline(tau_s=3600.0)
    baseline.apply(_devs([0.0], [0.0]), 0.0)
    x = baseline.apply(_devs([10.0], [100.0]), 3600.0)  # one time constant later: the baseline moved 63 %
    moved = 1.0 - math.exp(-1.0)
    assert x[0, col("temp_dev_excess")] == pytest.approx(10.0 * (1.0 - moved))
    assert x[0, col("power_dev_excess")] == pytest.approx(100.0 * (1.0 - moved))


def test_a_lost_reading_keeps_the_baseline_and_a_new_gpu_starts_its_own() -> None:
    baseline = DeviationBaseline(tau_s=3600.0)
    baseline.apply(_devs([4.0], [20.0]), 0.0)
    lost = baseline.apply(_devs([NAN], [NAN]), 60.0)
    assert math.isnan(lost[0, col("temp_dev_excess")])
    grown = baseline.apply(_devs([4.0, 7.0], [20.0, 9.0]), 120.0)  # a second GPU appears
    assert grown[:, col("temp_dev_excess")].tolist() == pytest.approx([0.0, 0.0])


def test_a_warm_up_that_moves_every_peer_is_not_a_temperature_drift() -> None:
    s = _series()
    s["temp_c"] = _series()["temp_c"] * 0 + np.array([[40.0], [50.0], [60.0], [70.0]]) + [0.0, 1.0, 2.0]
    x = gpu_features(s, np.full(3, 86_400.0))
    assert x[:, col("temp_dev_slope_per_min")].tolist() == pytest.approx([0.0, 0.0, 0.0])


def test_fleet_shaped_input_gives_the_same_rows_as_one_node_at_a_time() -> None:
    one = _series()
    fleet = {k: (np.stack([v, v * 2], axis=1) if k != "ts" else v) for k, v in one.items()}
    x = gpu_features(fleet, np.full((2, 3), 86_400.0))
    assert x.shape == (2, 3, len(FEATURES))
    np.testing.assert_allclose(x[0], gpu_features(one, np.full(3, 86_400.0)))


def test_a_lost_gpu_gives_nan_levels_and_its_peers_stay_finite() -> None:
    s = _series()
    for name in ("temp_c", "power_w", "sm_clock_mhz", "util_pct", "ecc_sbe", "nvlink_crc"):
        s[name][:, 2] = NAN
    x = gpu_features(s, np.full(3, 86_400.0))
    assert math.isnan(x[2, col("temp_dev_excess")])
    assert np.isfinite(x[:2]).all()


def _reading(i: int, temp: float, sbe: int, crc: int | None = None) -> GpuReading:
    links = [NvLinkReading(link=0, crc_errors=crc)] if crc is not None else []
    return GpuReading(index=i, temp_c=temp, power_w=500.0, sm_clock_mhz=1980.0, util_gpu_pct=90.0,
                      ecc_sbe_volatile=sbe, pcie_replay=0, row_remap_pending=False, nvlinks=links)


def test_the_window_series_feeds_the_features_in_time_order() -> None:
    window = NodeWindow(3, gpus=2)
    nic = {"symbol_error": 0, "link_error_recovery": 0, "link_downed": 0}
    for k in range(5):
        ib = NicReading(name="mlx5_0/1", link_layer="InfiniBand", counters={**nic, "symbol_error": 10 * k})
        window.push(view_of(TelemetrySample(node="n1", ts=60.0 * k, gpus=[_reading(0, 50.0 + k, 2 * k, crc=k),
                                                                   GpuReading(index=1, state=GpuState.LOST)],
                                    nics=[ib])))
    series = window.series()
    assert series["ts"].tolist() == [120.0, 180.0, 240.0]
    assert series["temp_c"][:, 0].tolist() == [52.0, 53.0, 54.0]
    assert np.isnan(series["temp_c"][:, 1]).all()
    assert series["nvlink_crc"][:, 0].tolist() == [2.0, 3.0, 4.0]
    x = gpu_features(series, window.xid_age_s(240.0, 86_400.0))
    assert x[0, col("ecc_sbe_per_h")] == pytest.approx(4 * 3600 / 120)
    assert x[0, col("ib_symbol_error_per_h")] == pytest.approx(20 * 3600 / 120)


def test_windows_stacked_on_their_own_times_give_each_window_its_own_features() -> None:
    """The detector scores its fleet's full windows in one pass (``stack_series``); each window keeps its own
    sample times, ring position, counter base and Xid age, so the rows equal those of one window at a time."""
    rng = np.random.default_rng(7)
    windows = []
    for n in range(3):
        window = NodeWindow(6, gpus=4)
        for k in range(6 + 2 * n + 1):  # rings wrapped to different positions
            gpus = [GpuReading(index=g, temp_c=float(rng.normal(60, 3)), power_w=float(rng.normal(500, 20)),
                               sm_clock_mhz=1980.0 - 50 * (g == n), util_gpu_pct=90.0,
                               ecc_sbe_volatile=2**25 * n + k * (g + 1) * int(rng.integers(0, 3)),
                               pcie_replay=k * n, row_remap_pending=g == 3,
                               throttle_reasons=0x40 if (k + g) % 3 == 0 else 0) for g in range(4)]
            if n == 1:
                gpus[2] = GpuReading(index=2, state=GpuState.LOST)
            ib = NicReading(name="mlx5_0/1", link_layer="infiniband",
                            counters={"symbol_error": 7 * k * n, "link_error_recovery": k // 3, "link_downed": 0})
            ts = 1000.0 * n + 13.0 * k + 0.1 * n * k
            window.push(view_of(TelemetrySample(node=f"n{n}", ts=ts, gpus=gpus, nics=[ib])))
        window.note_xid(1, 63, window.last_ts - 100.0 * n)
        windows.append(window)
    series = stack_series(windows)
    assert series["temp_c"].shape == (6, 3, 4) and series["ts"].shape == (6, 3)
    ages = np.stack([w.xid_age_s(w.last_ts, 86_400.0) for w in windows])
    stacked = gpu_features(series, ages)
    for i, window in enumerate(windows):
        one = gpu_features(window.series(), window.xid_age_s(window.last_ts, 86_400.0))
        np.testing.assert_allclose(stacked[i], one, rtol=1e-12, equal_nan=True)


def test_xid_age_counts_only_precursor_xids() -> None:
    window = NodeWindow(3, gpus=2)
    window.note_xid(0, 13, 100.0)  # an application error: not a sign of wear
    window.note_xid(1, 63, 100.0)
    assert window.xid_age_s(400.0, 86_400.0).tolist() == [86_400.0, 300.0]


def test_the_same_deviation_counts_for_less_in_a_fleet_with_noisier_sensors() -> None:
    rng = np.random.default_rng(0)
    scaled = []
    for noise in (0.5, 2.0):
        spread = FleetScale()
        for t in range(10):  # the fleet's deviations around their baselines, scored every minute
            spread.apply(_devs(list(rng.normal(0.0, noise, 400)), list(rng.normal(0.0, 10 * noise, 400))), 60.0 * t)
        x = spread.apply(_devs([5.0] * 8, [50.0] * 8), 600.0)  # one GPU 5 C / 50 W above; the fleet otherwise calm
        scaled.append(x[0, col("temp_dev_excess")])
        assert spread.value is not None and spread.value[0] == pytest.approx(noise, rel=0.25)
    assert scaled[0] == pytest.approx(4 * scaled[1], rel=0.3)


def test_a_perfectly_quiet_fleet_is_floored_so_a_tenth_of_a_degree_is_not_alarming() -> None:
    spread = FleetScale()
    x = spread.apply(_devs([0.0] * 10 + [0.1], [0.0] * 11), 0.0)
    assert x[-1, col("temp_dev_excess")] == pytest.approx(0.1 / SPREAD_FLOOR[0])
