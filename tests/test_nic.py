"""The NIC collector reads sysfs (recorded trees here, a real veth pair on the live /sys too) and never judges."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import codec
from sentinel.errors import CollectorError
from sentinel.events import NicReading, TelemetrySample
from sentinel_collectors.nic import NicCollector

FIXTURE = Path(__file__).parent / "fixtures" / "sysfs"
IB_COUNTERS = {
    "symbol_error": 3, "link_error_recovery": 1, "link_downed": 0, "port_rcv_errors": 2, "port_xmit_discards": 0,
    "local_link_integrity_errors": 0, "excessive_buffer_overrun_errors": 0, "port_xmit_wait": 4294967295,
    "port_xmit_data": 1844674407370, "port_rcv_data": 1739201193472, "VL15_dropped": 0,
    "port_rcv_remote_physical_errors": 0,
    "rnr_nak_retry_err": 0, "local_ack_timeout_err": 5, "out_of_sequence": 41, "roce_slow_restart": 0,
    "packet_seq_err": 7,
}


def by_name(readings: list[NicReading]) -> dict[str, NicReading]:
    return {r.name: r for r in readings}


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """A writable copy of the recorded tree."""
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE, root)
    return root


def write(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def test_recorded_tree_gives_one_reading_per_interface_and_ib_port_without_lo() -> None:
    collector = NicCollector(FIXTURE)
    assert [r.name for r in collector.read()] == ["eth0", "eth1", "ib0", "mlx5_0/1", "mlx5_1/1"]
    assert collector.skipped == 0


def test_an_up_ethernet_interface_is_read_with_state_carrier_speed_and_every_counter() -> None:
    eth0 = by_name(NicCollector(FIXTURE).read())["eth0"]
    assert (eth0.link_layer, eth0.state, eth0.carrier, eth0.speed_mbps, eth0.mtu) == ("ethernet", "up", True,
                                                                                      100000, 9000)
    assert (eth0.counters["carrier_changes"], eth0.counters["carrier_up_count"]) == (6, 3)
    assert eth0.counters["carrier_down_count"] == 3
    assert eth0.counters["rx_bytes"] == 918273645501 and eth0.counters["rx_crc_errors"] == 12
    assert len(eth0.counters) == 3 + 13  # carrier counters + every statistics/ file
    assert eth0.deltas == {}  # the first read has nothing to compare with


def test_a_down_interface_without_carrier_or_speed_reads_them_as_unknown() -> None:
    eth1 = by_name(NicCollector(FIXTURE).read())["eth1"]
    assert (eth1.state, eth1.carrier, eth1.speed_mbps, eth1.mtu) == ("down", None, None, 1500)
    assert eth1.counters["carrier_down_count"] == 1 and eth1.counters["rx_bytes"] == 0


def test_an_ipoib_interface_takes_its_link_layer_from_the_arphrd_type() -> None:
    ib0 = by_name(NicCollector(FIXTURE).read())["ib0"]
    assert (ib0.link_layer, ib0.speed_mbps, ib0.mtu) == ("infiniband", 400000, 4092)


def test_an_infiniband_port_is_read_with_verbatim_state_rate_and_both_counter_directories() -> None:
    port = by_name(NicCollector(FIXTURE).read())["mlx5_0/1"]
    assert (port.link_layer, port.state, port.carrier, port.speed_mbps) == ("infiniband", "4: ACTIVE", True, 400000)
    assert port.mtu is None
    assert port.counters == IB_COUNTERS  # a saturated 32-bit port_xmit_wait stays as read


def test_a_roce_port_that_is_down_has_no_carrier_and_no_hw_counters_directory_is_fine() -> None:
    port = by_name(NicCollector(FIXTURE).read())["mlx5_1/1"]
    assert (port.link_layer, port.state, port.carrier, port.speed_mbps) == ("ethernet", "1: DOWN", False, 100000)
    assert port.counters == {"symbol_error": 0, "link_downed": 1}


@pytest.mark.parametrize(
    ("rate", "mbps"),
    [("400 Gb/sec (4X NDR)", 400000), ("2.5 Gb/sec (1X SDR)", 2500), ("56 Gb/sec (4X FDR)", 56000),
     ("10 Mb/sec", 10), ("", None), ("fast", None)],
)
def test_the_ib_rate_string_becomes_megabits_per_second(sysfs: Path, rate: str, mbps: int | None) -> None:
    (sysfs / "class/infiniband/mlx5_0/ports/1/rate").write_text(rate)
    assert by_name(NicCollector(sysfs).read())["mlx5_0/1"].speed_mbps == mbps


def test_include_and_exclude_are_glob_patterns_and_an_ib_port_matches_by_device_too() -> None:
    assert [r.name for r in NicCollector(FIXTURE, include=["eth*"]).read()] == ["eth0", "eth1"]
    assert [r.name for r in NicCollector(FIXTURE, include=["mlx5_0"]).read()] == ["mlx5_0/1"]
    assert [r.name for r in NicCollector(FIXTURE, include=["*/1"], exclude=["mlx5_1*"]).read()] == ["mlx5_0/1"]
    assert "lo" in by_name(NicCollector(FIXTURE, exclude=[]).read())
    assert by_name(NicCollector(FIXTURE, exclude=[]).read())["lo"].link_layer == "loopback"


def test_carrier_and_speed_that_fail_or_are_empty_read_as_none(sysfs: Path) -> None:
    """EINVAL cannot be recorded in a file: an empty ``carrier`` and a directory ``speed`` take the same path."""
    eth0 = sysfs / "class/net/eth0"
    (eth0 / "carrier").write_text("")
    (eth0 / "speed").unlink()
    (eth0 / "speed").mkdir()
    reading = by_name(NicCollector(sysfs).read())["eth0"]
    assert (reading.carrier, reading.speed_mbps, reading.state) == (None, None, "up")


@pytest.mark.parametrize("speed", ["-1", "65535", "4294967295"])
def test_an_unknown_ethernet_speed_reads_as_none(sysfs: Path, speed: str) -> None:
    write(sysfs / "class/net/eth0/speed", speed)
    assert by_name(NicCollector(sysfs).read())["eth0"].speed_mbps is None


def test_garbage_negative_huge_or_unreadable_counter_files_are_skipped_and_counted(sysfs: Path) -> None:
    stats = sysfs / "class/net/eth0/statistics"
    write(stats / "rx_errors", "lots")
    write(stats / "tx_errors", -5)
    write(stats / "rx_dropped", 2**63)  # past int64: skipped, not clamped
    write(stats / "tx_dropped", 2**63 - 1)  # the largest value the wire carries
    write(stats / "rx_fifo_errors", "1_000")  # int() would accept it; sysfs never writes it
    (stats / "rx_over_errors").write_bytes(b"\xff\xfe")
    (stats / "rx_missed_errors").unlink()
    (stats / "rx_missed_errors").mkdir()  # reading it fails like an EIO/EINVAL would
    (sysfs / "class/infiniband/mlx5_0/ports/1/hw_counters/out_of_sequence").write_text("")
    collector = NicCollector(sysfs)
    readings = by_name(collector.read())
    assert collector.skipped == 7
    counters = readings["eth0"].counters
    for name in ("rx_errors", "tx_errors", "rx_dropped", "rx_fifo_errors", "rx_over_errors", "rx_missed_errors"):
        assert name not in counters
    assert counters["tx_dropped"] == 2**63 - 1 and counters["rx_bytes"] == 918273645501
    assert "out_of_sequence" not in readings["mlx5_0/1"].counters
    collector.read()
    assert collector.skipped == 14  # a running total, ready for a _total metric


def test_a_hw_counter_that_repeats_an_ibta_counter_name_is_kept_with_a_hw_prefix(sysfs: Path) -> None:
    write(sysfs / "class/infiniband/mlx5_0/ports/1/hw_counters/symbol_error", 99)
    counters = by_name(NicCollector(sysfs).read())["mlx5_0/1"].counters
    assert (counters["symbol_error"], counters["hw_symbol_error"]) == (3, 99)


def test_the_mlx5_lifespan_knob_is_not_taken_for_a_counter(sysfs: Path) -> None:
    write(sysfs / "class/infiniband/mlx5_0/ports/1/hw_counters/lifespan", 10)
    assert "lifespan" not in by_name(NicCollector(sysfs).read())["mlx5_0/1"].counters


def test_deltas_equal_the_increase_since_the_previous_read(sysfs: Path) -> None:
    collector = NicCollector(sysfs)
    collector.read()
    write(sysfs / "class/net/eth0/statistics/rx_crc_errors", 12 + 40)
    write(sysfs / "class/net/eth0/carrier_changes", 6 + 2)
    write(sysfs / "class/infiniband/mlx5_0/ports/1/counters/symbol_error", 3 + 500)
    write(sysfs / "class/infiniband/mlx5_0/ports/1/hw_counters/rnr_nak_retry_err", 0 + 1)
    readings = by_name(collector.read())
    eth0, port = readings["eth0"].deltas, readings["mlx5_0/1"].deltas
    assert (eth0["rx_crc_errors"], eth0["carrier_changes"], eth0["rx_bytes"]) == (40, 2, 0)
    assert {k: v for k, v in eth0.items() if v} == {"rx_crc_errors": 40, "carrier_changes": 2}
    assert {k: v for k, v in port.items() if v} == {"symbol_error": 500, "rnr_nak_retry_err": 1}
    assert set(port) == set(IB_COUNTERS)


def test_a_counter_that_went_down_has_no_delta_and_no_delta_is_negative(sysfs: Path) -> None:
    collector = NicCollector(sysfs)
    collector.read()
    write(sysfs / "class/infiniband/mlx5_0/ports/1/counters/symbol_error", 0)  # perfquery -r
    write(sysfs / "class/net/eth0/statistics/rx_bytes", 1)  # driver reload
    readings = by_name(collector.read())
    assert "symbol_error" not in readings["mlx5_0/1"].deltas and "rx_bytes" not in readings["eth0"].deltas
    assert readings["mlx5_0/1"].deltas["link_downed"] == 0
    assert all(v >= 0 for r in readings.values() for v in r.deltas.values())
    write(sysfs / "class/infiniband/mlx5_0/ports/1/counters/symbol_error", 4)
    assert by_name(collector.read())["mlx5_0/1"].deltas["symbol_error"] == 4  # counting again from the reset


def test_a_nic_that_vanishes_and_returns_starts_without_deltas(sysfs: Path) -> None:
    collector = NicCollector(sysfs, include=["eth0"])
    collector.read()
    moved = sysfs.parent / "eth0"
    (sysfs / "class/net/eth0").rename(moved)
    assert collector.read() == []
    moved.rename(sysfs / "class/net/eth0")
    assert collector.read()[0].deltas == {}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["rx_errors", "rx_crc_errors", "rx_bytes"]),
                                st.integers(min_value=-3, max_value=2**64), max_size=3), min_size=1, max_size=6))
def test_no_delta_is_ever_negative_over_any_sequence_of_counter_values(reads: list[dict[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stats = Path(tmp) / "class/net/eth0/statistics"
        stats.mkdir(parents=True)
        collector, previous = NicCollector(tmp), dict[str, int]()
        for values in reads:
            for f in stats.iterdir():
                f.unlink()
            for name, value in values.items():
                write(stats / name, value)
            [reading] = collector.read()
            assert reading.counters == {k: v for k, v in values.items() if 0 <= v < 2**63}
            assert reading.deltas == {k: v - previous[k] for k, v in reading.counters.items()
                                      if k in previous and v >= previous[k]}
            assert all(0 <= d < 2**63 for d in reading.deltas.values())
            previous = reading.counters


def test_readings_survive_the_wire_codec() -> None:
    sample = TelemetrySample(node="gpu-node-001", ts=1.0, nics=NicCollector(FIXTURE).read())
    assert codec.decode_as(codec.encode(sample), TelemetrySample) == sample


def test_a_host_without_net_or_infiniband_classes_has_no_nics(tmp_path: Path) -> None:
    (tmp_path / "class").mkdir()
    assert NicCollector(tmp_path).read() == []


def test_a_missing_sysfs_root_is_a_collector_error(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="does not exist"):
        NicCollector(tmp_path / "nope").read()


# --- the real kernel: a veth pair whose host end we flap -------------------------------------------------------

def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def veth() -> Iterator[str]:
    """A veth pair, host end up and peer up inside a fresh namespace; removed afterwards whatever happens."""
    why = None
    if shutil.which("ip") is None:
        why = "the ip command (iproute2) is not installed"
    elif os.geteuid() != 0:
        why = "creating network namespaces and veth pairs needs root"
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"{why}, and under CI this test must run")
        pytest.skip(why)
    pid = os.getpid()
    namespace, host_end, peer = f"sntl{pid}", f"sntl{pid}a", f"sntl{pid}b"
    try:
        _ip("netns", "add", namespace)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", peer, "netns", namespace)
        _ip("link", "set", host_end, "up")
        _ip("-n", namespace, "link", "set", peer, "up")
        yield host_end
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)


def test_flapping_a_real_veth_link_moves_carrier_changes_and_its_delta(veth: str) -> None:
    collector = NicCollector(include=[veth])
    [before] = collector.read()
    assert (before.name, before.link_layer, before.carrier, before.speed_mbps) == (veth, "ethernet", True, 10000)
    _ip("link", "set", veth, "down")
    [down] = collector.read()
    assert (down.carrier, down.speed_mbps) == (None, None)  # the kernel answers EINVAL while it is down
    assert down.deltas["carrier_down_count"] == 1
    _ip("link", "set", veth, "up")
    [after] = collector.read()
    assert after.carrier is True
    assert after.counters["carrier_changes"] == before.counters["carrier_changes"] + 2
    assert (after.deltas["carrier_changes"], after.deltas["carrier_up_count"]) == (1, 1)
    assert collector.skipped == 0
