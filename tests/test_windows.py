"""Window maths: counter deltas are never negative, and the ring buffer returns the latest rows in time order."""

from __future__ import annotations

import math
import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel.counters import counter_deltas
from sentinel.detector.sample_view import SampleView, view_of
from sentinel.detector.windows import NodeWindow, counter_delta
from sentinel.events import GpuReading, GpuState, TelemetrySample

counter_reads = st.none() | st.integers(min_value=0, max_value=2**64 - 1)
temperatures = st.floats(min_value=-40.0, max_value=130.0, allow_nan=False)


def sample(ts: float, *gpus: GpuReading) -> SampleView:
    """What the detector decodes of a sample with these GPUs."""
    return view_of(TelemetrySample(node="gpu-01", ts=ts, gpus=list(gpus)))


def hot(index: int, temp_c: float | None, throttle: int | None = None) -> GpuReading:
    return GpuReading(index=index, temp_c=temp_c, throttle_reasons=throttle)


def column(window: NodeWindow, gpu: int, n: int) -> list[float]:
    return window.recent(window.temp_c, n)[:, gpu].tolist()


# ----- counter arithmetic ------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(counter_reads, counter_reads)
def test_counter_delta_is_the_increase_or_none_and_never_negative(previous: int | None, current: int | None) -> None:
    delta = counter_delta(previous, current)
    if previous is None or current is None or current < previous:
        assert delta is None
    else:
        assert delta == current - previous
        assert delta >= 0


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2**64 - 1), st.lists(st.integers(min_value=0, max_value=10**6), max_size=10))
def test_counter_deltas_of_a_monotonic_series_add_up_to_the_total_increase(start: int, steps: list[int]) -> None:
    reads = [start]
    for step in steps:
        reads.append(reads[-1] + step)
    deltas = [counter_delta(a, b) for a, b in zip(reads, reads[1:], strict=False)]
    assert sum(d for d in deltas if d is not None) == reads[-1] - reads[0]
    assert all(d is not None for d in deltas)


def test_a_counter_reset_gives_no_delta_rather_than_a_negative_or_wrapped_one() -> None:
    assert counter_delta(1_000, 3) is None
    assert counter_delta(2**64 - 1, 0) is None


@settings(max_examples=100, deadline=None)
@given(
    st.none() | st.dictionaries(st.sampled_from("abcd"), counter_reads, max_size=4),
    st.dictionaries(st.sampled_from("abcd"), counter_reads, max_size=4),
)
def test_counter_deltas_keep_only_counters_with_a_known_non_negative_increase(
    previous: dict[str, int | None] | None, current: dict[str, int | None]
) -> None:
    deltas = counter_deltas(previous, current)
    for name, delta in deltas.items():
        assert previous is not None
        assert delta >= 0 and delta == counter_delta(previous.get(name), current[name])
    for name in set(current) - set(deltas):
        assert counter_delta((previous or {}).get(name), current[name]) is None


# ----- NodeWindow --------------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    size=st.integers(min_value=2, max_value=8),
    temps=st.lists(temperatures, max_size=30),
    n=st.integers(min_value=0, max_value=40),
)
def test_recent_returns_the_last_rows_in_time_order_after_the_ring_wraps(size: int, temps: list[float], n: int) -> None:
    window = NodeWindow(size, gpus=1)
    for i, temp in enumerate(temps):
        window.push(sample(float(i), hot(0, temp)))
    keep = min(n, len(temps), size)
    # gauges are float32 in the window (4 KB per GPU at most, issue 18): ~7 significant digits
    assert column(window, 0, n) == [float(np.float32(t)) for t in temps[len(temps) - keep :]]


def test_recent_after_many_wraps_returns_the_last_n_temperatures() -> None:
    window = NodeWindow(4, gpus=2)
    for i in range(11):
        window.push(sample(float(i), hot(0, 50.0 + i), hot(1, 70.0 + i)))
    assert column(window, 0, 3) == [58.0, 59.0, 60.0]
    assert column(window, 1, 4) == [77.0, 78.0, 79.0, 80.0]
    assert column(window, 0, 100) == [57.0, 58.0, 59.0, 60.0]  # never more than the ring holds
    assert window.last_ts == 10.0


def test_recent_before_anything_was_pushed_is_empty() -> None:
    window = NodeWindow(5, gpus=2)
    assert window.recent(window.temp_c, 3).shape == (0, 2)


def test_recent_throttle_follows_the_same_ring_as_temperature() -> None:
    window = NodeWindow(3, gpus=1)
    for i in range(5):
        window.push(sample(float(i), hot(0, 80.0, throttle=1 << i)))
    assert window.recent(window.throttle, 3)[:, 0].tolist() == [1 << 2, 1 << 3, 1 << 4]


def test_a_lost_gpu_reads_nan_temperature_even_if_a_value_was_reported() -> None:
    window = NodeWindow(4, gpus=2)
    window.push(sample(1.0, hot(0, 60.0), GpuReading(index=1, state=GpuState.LOST, temp_c=55.0)))
    row = window.recent(window.temp_c, 1)[0]
    assert row[0] == 60.0
    assert math.isnan(row[1])


def test_a_missing_temperature_reads_nan() -> None:
    window = NodeWindow(4, gpus=1)
    window.push(sample(1.0, hot(0, None)))
    assert math.isnan(window.recent(window.temp_c, 1)[0, 0])


def test_a_gpu_absent_from_a_sample_does_not_keep_the_stale_value_of_the_overwritten_row() -> None:
    window = NodeWindow(2, gpus=2)
    window.push(sample(1.0, hot(0, 40.0), hot(1, 90.0, throttle=7)))
    window.push(sample(2.0, hot(0, 41.0), hot(1, 91.0, throttle=7)))
    window.push(sample(3.0, hot(0, 42.0)))  # overwrites row 0; GPU 1 did not report
    latest = window.recent(window.temp_c, 1)[0]
    assert latest[0] == 42.0 and math.isnan(latest[1])
    assert window.recent(window.throttle, 1)[0, 1] == 0


def test_the_window_grows_gpu_columns_when_a_sample_has_more_gpus() -> None:
    window = NodeWindow(3, gpus=1)
    window.push(sample(1.0, hot(0, 50.0)))
    window.push(sample(2.0, hot(0, 51.0), hot(1, 61.0), hot(3, 63.0)))
    assert window.temp_c.shape == (3, 4)
    assert window.throttle.shape == (3, 4)
    rows = window.recent(window.temp_c, 2)
    assert rows[:, 0].tolist() == [50.0, 51.0]
    assert math.isnan(rows[0, 1]) and rows[1, 1] == 61.0  # the new column is NaN before it was seen
    assert math.isnan(rows[1, 2])  # a gap in the indices stays NaN
    assert rows[1, 3] == 63.0


def test_a_sample_with_fewer_gpus_never_shrinks_the_window() -> None:
    window = NodeWindow(3, gpus=4)
    window.push(sample(1.0, hot(0, 50.0)))
    assert window.temp_c.shape == (3, 4)
    assert np.isnan(window.recent(window.temp_c, 1)[0, 1:]).all()


def test_the_largest_counter_the_codec_accepts_fits_the_throttle_column() -> None:
    window = NodeWindow(2, gpus=1)
    window.push(sample(1.0, hot(0, 50.0, throttle=2**63 - 1)))
    assert window.recent(window.throttle, 1)[0, 0] == 2**63 - 1


def test_counters_far_beyond_float32_keep_exact_differences_and_absolute_values() -> None:
    """Counters are float32 offsets from a float64 base (issue 18: 4 KB per GPU); a big counter that keeps
    counting, or jumps by more than float32's exact range, still gives exact steps and its absolute value."""
    window = NodeWindow(4, gpus=1)
    values = [5_000_000_001, 5_000_000_002, 5_000_000_004, 5_050_000_004, 5_050_000_005]  # the 4th: a 5e7 jump
    for i, value in enumerate(values):
        window.push(sample(float(i), GpuReading(index=0, temp_c=50.0, pcie_replay=value)))
    series = window.series()["pcie_replay"][:, 0]
    assert series[-2:].tolist() == [5_050_000_004.0, 5_050_000_005.0]  # exact after the jump
    # rows before a jump wider than float32's exact range keep float32's relative precision (1e-7 of the jump)
    assert np.abs(series[:2] - [5_000_000_002.0, 5_000_000_004.0]).max() <= 4
    window = NodeWindow(4, gpus=1)
    for i in range(6):  # no jump: every step exact however large the counter
        window.push(sample(float(i), GpuReading(index=0, temp_c=50.0, pcie_replay=9_000_000_000_000 + i * i)))
    assert np.diff(window.series()["pcie_replay"][:, 0]).tolist() == [5.0, 7.0, 9.0]
    assert window.counters_moved


def test_an_absurd_gauge_reads_inf_and_leaves_the_next_readings_exact() -> None:
    """The codec lets any finite float through; a gauge beyond float32's range reads inf for that sample (no
    overflow warning escapes) and leaves the readings around it exact (before, it moved a base meant for
    counters and the next reading was lost to float64's precision)."""
    window = NodeWindow(4, gpus=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i, temp in enumerate([1e300, 50.0, 51.0]):
            window.push(sample(float(i), hot(0, temp)))
        series = window.series()["temp_c"][:, 0]
    assert series.tolist() == [math.inf, 50.0, 51.0]


def test_the_push_notes_whether_a_counter_rose() -> None:
    window = NodeWindow(4, gpus=1)
    window.push(sample(1.0, GpuReading(index=0, temp_c=50.0, pcie_replay=3)))
    window.push(sample(2.0, GpuReading(index=0, temp_c=51.0, pcie_replay=3)))
    assert not window.counters_moved
    window.push(sample(3.0, GpuReading(index=0, temp_c=52.0, pcie_replay=4)))
    assert window.counters_moved
    window.push(sample(4.0, GpuReading(index=0, temp_c=52.0, pcie_replay=1)))  # a reset: nothing counted
    assert not window.counters_moved


def test_nvlink_crc_is_summed_over_links_a_link_without_the_counter_counting_zero() -> None:
    from sentinel.detector.windows import GPU_FIELDS
    from sentinel.events import NvLinkReading

    crc = GPU_FIELDS.index("nvlink_crc")
    window = NodeWindow(4, gpus=3)
    links = [NvLinkReading(link=k, crc_errors=k) for k in range(12)]  # 0 + 1 + ... + 11 = 66
    window.push(sample(1.0, GpuReading(index=0, nvlinks=links),
                       GpuReading(index=1, nvlinks=[*links[:3], NvLinkReading(link=3)]),  # 0 + 1 + 2 + nothing
                       GpuReading(index=2)))  # no NVLink reading at all: unknown
    row = window.gpu[0, crc] + window.base[crc]
    assert row[:2].tolist() == [66.0, 3.0] and math.isnan(row[2])


# ----- the push's fast path and the general one read the same ------------------------------------------------

_READINGS = st.builds(
    lambda state, temp, power, clock, util, sbe, pcie, pending, throttle, links: (
        state, dict(temp_c=temp, power_w=power, sm_clock_mhz=clock, util_gpu_pct=util, ecc_sbe_volatile=sbe,
                    pcie_replay=pcie, row_remap_pending=pending, throttle_reasons=throttle), links),
    st.sampled_from([GpuState.OK, GpuState.OK, GpuState.OK, GpuState.LOST]),
    *(st.none() | st.floats(min_value=0.0, max_value=2000.0) for _ in range(4)),
    st.none() | st.integers(min_value=0, max_value=1000), st.none() | st.integers(min_value=0, max_value=1000),
    st.none() | st.booleans(), st.none() | st.integers(min_value=0, max_value=255),
    st.lists(st.none() | st.integers(min_value=0, max_value=1000), max_size=3),
)


def _reference(reading: tuple) -> tuple[list[float], int]:
    """GPU_FIELDS of one GPU as the window should hold them, written out plainly; and its throttle reasons."""
    state, fields, links = reading
    if state is GpuState.LOST:
        return [math.nan] * 8, fields["throttle_reasons"] or 0
    values = [fields[k] for k in ("temp_c", "power_w", "sm_clock_mhz", "util_gpu_pct", "ecc_sbe_volatile",
                                   "pcie_replay")]
    crc = float(sum(v or 0 for v in links)) if links else math.nan
    pending = fields["row_remap_pending"]
    row = [math.nan if v is None else float(v) for v in values] + [crc, math.nan if pending is None else float(pending)]
    return row, fields["throttle_reasons"] or 0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_READINGS, min_size=1, max_size=3), min_size=1, max_size=6), st.booleans())
def test_every_push_reads_each_gpu_as_the_plain_reference_does(steps: list[list[tuple]], shuffle: bool) -> None:
    """Samples with every GPU in order take the push's fast path (fields read across GPUs at once); a lost GPU,
    a missing reading (None) or GPUs out of order take the general one: both must store the same values."""
    from sentinel.events import NvLinkReading

    window = NodeWindow(8, gpus=1)
    expected: list[tuple[list[list[float]], list[int]]] = []
    for t, readings in enumerate(steps):
        gpus = [GpuReading(index=i, state=state, nvlinks=[NvLinkReading(link=k, crc_errors=v)
                                                          for k, v in enumerate(links)], **fields)
                for i, (state, fields, links) in enumerate(readings)]
        window.push(sample(float(t), *(reversed(gpus) if shuffle else gpus)))
        rows = [_reference(r) for r in readings]
        expected.append(([row for row, _ in rows], [thr for _, thr in rows]))
    series = window.series()
    width = window.gpus
    for t, (rows, throttles) in enumerate(expected):
        for gpu in range(width):
            want = rows[gpu] if gpu < len(rows) else [math.nan] * 8
            got = [series[name][t, gpu] for name in ("temp_c", "power_w", "sm_clock_mhz", "util_pct", "ecc_sbe",
                                                     "pcie_replay", "nvlink_crc", "remap_pending")]
            assert np.allclose(got, want, equal_nan=True, rtol=1e-6, atol=1e-3), (t, gpu, got, want)
            assert series["throttle"][t, gpu] == (throttles[gpu] if gpu < len(rows) else 0)


def test_infiniband_counters_are_summed_over_the_ports_that_have_them() -> None:
    """IPoIB interfaces (infiniband link layer, none of the port counters) and a port without one counter do
    not turn a sum into NaN or drop the other ports; a counter no port has reads NaN."""
    from sentinel.events import NicReading

    def ib(symbol: int, recovery: int | None) -> list[NicReading]:
        port = {"symbol_error": symbol, **({} if recovery is None else {"link_error_recovery": recovery})}
        return [NicReading(name="ib0", link_layer="infiniband", counters={"rx_bytes": 5}),
                NicReading(name="mlx5_0/1", link_layer="infiniband", counters=port),
                NicReading(name="mlx5_1/1", link_layer="InfiniBand", counters={"symbol_error": 2}),
                NicReading(name="eth0", link_layer="ethernet", counters={"symbol_error": 100})]

    window = NodeWindow(4, gpus=1)
    window.push(view_of(TelemetrySample(node="n", ts=1.0, gpus=[hot(0, 50.0)], nics=ib(1, None))))
    window.push(view_of(TelemetrySample(node="n", ts=2.0, gpus=[hot(0, 50.0)], nics=ib(1, 4))))
    assert not window.ib_moved  # a counter that appears is not a rise
    window.push(view_of(TelemetrySample(node="n", ts=3.0, gpus=[hot(0, 50.0)], nics=ib(3, 4))))
    assert window.ib_moved
    series = window.series()
    assert series["ib_symbol_error"].tolist() == [3.0, 3.0, 5.0]
    assert np.allclose(series["ib_link_error_recovery"], [math.nan, 4.0, 4.0], equal_nan=True)
    assert np.isnan(series["ib_link_downed"]).all()
