"""Kernel log in every format real nodes write (issue 36 item 6): each format's prefix is recognised and its clock
read, multi-line driver reports become one event by a bounded rule, and `sentinel parse-log FILE -o json` shows it.

Lines are written as the kernel, dmesg, journald, rsyslog and the NVIDIA/mlx5 drivers print them; expected values
are written out by hand, not derived from the pattern table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import codec
from sentinel.clock import ManualClock
from sentinel.errors import ConfigError
from sentinel.events import LogEvent, LogKind
from sentinel_collectors.kmsg import FUTURE_S, default_patterns, join_lines, load_patterns, parse_line
from sentinel_collectors.kmsg_source import KmsgSource

NODE = "gpu-node-001"
REF = datetime(2026, 12, 8, 12, 0, 0, tzinfo=UTC).timestamp()  # the reader's clock: after every line below
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
LOCAL = datetime(2026, 12, 7, 12, 0, 1).timestamp()  # 12:00:01 on Dec 7 in the reader's zone (no zone printed)
UTC_01 = datetime(2026, 12, 7, 12, 0, 1, tzinfo=UTC).timestamp()

# (format, line, the event's expected time): a line with a wall-clock time carries it; seconds since boot do not
FORMATS: list[tuple[str, str, float]] = [
    ("dev-kmsg-record", f"3,1042,9329702794,-;{XID}", REF),
    ("dev-kmsg-record-with-caller", f"3,1043,9329702794,c,caller=T12;{XID}", REF),
    ("dmesg-fractional", f"[   12.345678] {XID}", REF),
    ("dmesg-integer", f"[123] {XID}", REF),
    ("dmesg-T", f"[Mon Dec  7 12:00:01 2026] {XID}", LOCAL),
    ("journal-short", f"Dec 07 12:00:01 gpu-node-001 kernel: {XID}", LOCAL),
    ("journal-short-iso", f"2026-12-07T12:00:01+0000 gpu-node-001 kernel: {XID}", UTC_01),
    ("journal-short-precise", f"Dec 07 12:00:01.123456 gpu-node-001 kernel: {XID}", LOCAL + 0.123456),
    ("syslog-rfc3164", f"<4>Dec  7 12:00:01 gpu-node-001 kernel: {XID}", LOCAL),
    ("syslog-rfc3164-with-dmesg-stamp", f"<3>Dec  7 12:00:01 gpu-node-001 kernel: [  219.470994] {XID}", LOCAL),
    ("syslog-rfc5424", f"<4>1 2026-12-07T12:00:01.123456+00:00 gpu-node-001 kernel - - - {XID}", UTC_01 + 0.123456),
    ("syslog-rfc5424-structured-data-bom",
     f'<3>1 2026-12-07T13:00:01.5+01:00 gpu-node-001 kernel - - [timeQuality tzKnown="1" isSynced="1"] \ufeff{XID}',
     UTC_01 + 0.5),
    ("syslog-rfc5424-no-timestamp", f"<4>1 - gpu-node-001 kernel - - - {XID}", REF),
    ("rsyslog-iso", f"2026-12-07T12:00:01.123+00:00 gpu-node-001 kernel: {XID}", UTC_01 + 0.123),
    ("dmesg-time-format-iso", f"2026-12-07T12:00:01,123456+00:00 {XID}", UTC_01 + 0.123456),
]


@pytest.mark.parametrize(("line", "ts"), [pytest.param(line, ts, id=fmt) for fmt, line, ts in FORMATS])
def test_each_log_format_is_recognised_with_its_own_clock(line: str, ts: float) -> None:
    event = parse_line(line, NODE, REF)
    assert event is not None, line
    assert (event.kind, event.xid, event.pci_bus_id, event.message) == (LogKind.XID, 79, "0000:3b:00", XID)
    assert event.ts == pytest.approx(ts, abs=1e-6)
    assert codec.decode_as(codec.encode(event), LogEvent) == event


@pytest.mark.parametrize("line", [
    f"<13>Dec  7 12:00:01 gpu-node-001 kernel: {XID}",  # logger -t kernel: facility user, not the kernel
    f"<30>1 2026-12-07T12:00:01+00:00 gpu-node-001 gpud 811 - - {XID}",  # a daemon repeating the line
    f"<4>1 2026-12-07T12:00:01+00:00 gpu-node-001 gpud 811 - - {XID}",  # RFC 5424, another APP-NAME
    f"Dec 07 12:00:01.123456 gpu-node-001 gpud[811]: {XID}",  # journal short-precise, another program
    f"14,1044,9329702800,-;{XID}",  # /dev/kmsg record written by userspace
])
def test_a_line_another_program_wrote_is_not_a_kernel_event(line: str) -> None:
    assert parse_line(line, NODE, REF) is None


def test_a_time_without_a_year_takes_the_latest_year_not_after_the_reader() -> None:
    new_year = datetime(2027, 1, 1, 0, 0, 30).timestamp()  # reader's clock just after midnight, local time
    event = parse_line(f"Dec 31 23:59:58 gpu-node-001 kernel: {XID}", NODE, new_year)
    assert event is not None and event.ts == datetime(2026, 12, 31, 23, 59, 58).timestamp()
    event = parse_line(f"Jan  1 00:00:29 gpu-node-001 kernel: {XID}", NODE, new_year)
    assert event is not None and event.ts == datetime(2027, 1, 1, 0, 0, 29).timestamp()


def test_a_wall_clock_time_after_the_reader_is_not_trusted() -> None:
    """A misread zone or year must not put an event in the future: the reader's clock is used instead."""
    ahead = datetime(2026, 12, 8, 12, 0, 0, tzinfo=UTC).timestamp() + FUTURE_S + 60
    line = f"{datetime.fromtimestamp(ahead, UTC).isoformat()} gpu-node-001 kernel: {XID}"
    event = parse_line(line, NODE, REF)
    assert event is not None and event.ts == REF
    skewed = parse_line(f"2026-12-08T12:00:30+00:00 gpu-node-001 kernel: {XID}", NODE, REF)
    assert skewed is not None and skewed.ts == REF + 30  # within FUTURE_S: clock skew, kept


def events(lines: list[str]) -> list[tuple[int, LogEvent]]:
    return list(join_lines(lines, NODE, REF))


# ------------------------------------------------------------------------------------------------ NVSwitch SXid
def test_a_fatal_sxid_carries_switch_pci_code_severity_and_link() -> None:
    [(number, event)] = events([
        "[ 3051.120043] nvidia-nvswitch3: SXid (PCI:0000:c7:00.0): 20034, Fatal, Link 46 LTSSM Fault Up",
        "[ 3051.120049] nvidia-nvswitch3: SXid (PCI:0000:c7:00.0): 20034, Severity 5 Engine instance 46 "
        "Sub-engine instance 00",
        "[ 3051.120055] nvidia-nvswitch3: SXid (PCI:0000:c7:00.0): 20034, Data {0x00000000, 0x00000000, 0x00000001}",
    ])
    assert number == 1 and (event.kind, event.pci_bus_id, event.xid) == (LogKind.SXID, "0000:c7:00.0", None)
    assert event.attrs == {"switch": "3", "switch_pci": "0000:c7:00.0", "sxid": "20034", "severity": "Fatal",
                           "link": "46", "error": "LTSSM Fault Up", "severity_level": "5", "engine": "46",
                           "subengine": "0", "data": "0x00000000, 0x00000000, 0x00000001"}
    assert event.message.count("nvidia-nvswitch3: SXid") == 3


def test_a_non_fatal_sxid_and_its_continuation_lines_are_one_event() -> None:
    lines = [
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 08 egress non-posted PRIV error (First)",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Severity 0 Engine instance 08 Sub-engine instance 00",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Data {0x00000000, 0x00000000, 0x00000000, 0x00000000}",
        # the next report: same switch and code, another link: its own event
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 09 egress non-posted PRIV error (First)",
    ]
    [(_, first), (number, second)] = events(lines)
    assert (first.kind, first.pci_bus_id, first.attrs["sxid"], first.attrs["severity"]) == (
        LogKind.SXID, "0000:05:00.0", "12028", "Non-fatal")
    assert (first.attrs["link"], first.attrs["engine"], first.attrs["error"]) == (
        "8", "8", "egress non-posted PRIV error (First)")
    assert first.attrs["data"].startswith("0x00000000") and first.message.count(" | ") == 2
    assert number == 4 and second.attrs["link"] == "9"
    # a continuation line alone is not an event (as before): it only adds to its report
    assert parse_line(lines[1], NODE, REF) is None


# ------------------------------------------------------------------------------------------------ PCIe AER
AER_PORT_PRINTS_ALL = [  # older kernels: the root port prints the whole report; status and bit lines indented
    "[  418.221304] pcieport 0000:00:01.0: AER: Corrected error received: 0000:17:00.0",
    "[  418.221311] pcieport 0000:00:01.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
    "[  418.221315]   device [10de:2330] error status/mask=00000001/0000e000",
    "[  418.221318]    [ 0] RxErr",
]
AER_DEVICE_PRINTS_DETAIL = [  # newer kernels: the device the error is about prints the detail
    "Dec 07 12:00:01 gpu-node-001 kernel: pcieport 0000:00:01.0: AER: Corrected error received: 0000:17:00.0",
    "Dec 07 12:00:01 gpu-node-001 kernel: nvidia 0000:17:00.0: PCIe Bus Error: severity=Corrected, "
    "type=Physical Layer, (Receiver ID)",
    "Dec 07 12:00:01 gpu-node-001 kernel: nvidia 0000:17:00.0:   device [10de:2330] error "
    "status/mask=00000001/0000e000",
    "Dec 07 12:00:01 gpu-node-001 kernel: nvidia 0000:17:00.0:    [ 0] RxErr                  (First)",
]


@pytest.mark.parametrize("lines", [AER_PORT_PRINTS_ALL, AER_DEVICE_PRINTS_DETAIL], ids=["port", "device"])
def test_an_aer_report_is_one_event_with_the_pci_address_of_its_first_line(lines: list[str]) -> None:
    [(number, event)] = events(lines)
    assert number == 1 and event.kind is LogKind.PCIE_AER and event.pci_bus_id == "0000:17:00.0"
    assert event.attrs == {"severity": "corrected", "part": "header", "device": "0000:17:00.0",
                           "type": "Physical Layer"}
    assert event.message.count(" | ") == 3 and event.message.endswith("RxErr" if lines is AER_PORT_PRINTS_ALL
                                                                        else "RxErr                  (First)")


def test_back_to_back_aer_reports_stay_two_events() -> None:
    two = AER_PORT_PRINTS_ALL + [line.replace("418.2213", "418.2215") for line in AER_PORT_PRINTS_ALL]
    assert [(n, e.message.count(" | ")) for n, e in events(two)] == [(1, 3), (5, 3)]


def test_a_detail_line_without_its_header_is_still_an_event() -> None:
    [(_, event)] = events(AER_DEVICE_PRINTS_DETAIL[1:])
    assert event.attrs["part"] == "detail" and event.pci_bus_id == "0000:17:00.0" and event.message.count(" | ") == 2


# ------------------------------------------------------------------------------------------------ Xid
def test_an_xid_13_report_joins_its_exception_lines_and_keeps_other_gpus_apart() -> None:
    lines = [
        "[93297.027938] NVRM: Xid (PCI:0000:3b:00): 13, pid=1797828, name=python3, Graphics SM Warp Exception on "
        "(GPC 0, TPC 0, SM 0): Out Of Range Address",
        "[93297.027941] NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "[93297.027944] NVRM: Xid (PCI:0000:3b:00): 13, pid=1797828, name=python3, Graphics SM Global Exception on "
        "(GPC 0, TPC 0, SM 0): Multiple Warp Errors",
        "[93297.027950] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception: ESR 0x504648=0x102000e 0x504650=0x0",
        "[93297.029837] NVRM: Xid (PCI:0000:3b:00): 13, pid=1797828, name=python3, Graphics SM Warp Exception on "
        "(GPC 1, TPC 0, SM 0): Out Of Range Address",
    ]
    joined = events(lines)
    assert [(n, e.xid, e.pci_bus_id, e.message.count(" | ")) for n, e in joined] == [
        (1, 13, "0000:3b:00", 2), (2, 79, "0000:86:00", 0), (5, 13, "0000:3b:00", 0)]
    assert joined[0][1].attrs == {"pid": "1797828", "process": "python3"}
    assert "ESR 0x504648" in joined[0][1].message


def test_repeated_xid_lines_that_are_not_continuations_stay_separate_events() -> None:
    line = "[  5.1] NVRM: Xid (PCI:0000:65:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error"
    assert len(events([line, line.replace("5.1]", "5.2]")])) == 2
    esr = "NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x52e7b0=0x101"
    assert len(events([esr, esr])) == 2  # ESR lines without their warp-exception line: each its own event


# ------------------------------------------------------------------------------------------------ mlx5 and GHES
MLX5_HEALTH = [
    "[ 8203.117654] mlx5_core 0000:5e:00.1: poll_health:801:(pid 0): Fatal error 1 detected",
    "[ 8203.117660] mlx5_core 0000:5e:00.1: print_health_info:435:(pid 0): assert_var[0] 0x00000000",
    "[ 8203.117663] mlx5_core 0000:5e:00.1: print_health_info:435:(pid 0): assert_var[1] 0x00000000",
    "[ 8203.117667] mlx5_core 0000:5e:00.1: print_health_info:438:(pid 0): assert_exit_ptr 0x00000000",
    "[ 8203.117671] mlx5_core 0000:5e:00.1: print_health_info:443:(pid 0): fw_ver 16.26.1040",
    "[ 8203.117675] mlx5_core 0000:5e:00.1: print_health_info:446:(pid 0): synd 0x1: firmware internal error",
    "[ 8203.117679] mlx5_core 0000:5e:00.1: print_health_info:447:(pid 0): ext_synd 0x8f6d",
]


def test_an_mlx5_health_dump_is_one_fatal_nic_event() -> None:
    [(_, event)] = events(MLX5_HEALTH)
    assert event.kind is LogKind.NIC and event.attrs == {"severity": "fatal", "device": "0000:5e:00.1"}
    assert event.message.count(" | ") == 6 and event.message.endswith("ext_synd 0x8f6d")


def test_a_fatal_line_after_a_warning_from_the_same_device_is_not_swallowed() -> None:
    lines = ["[ 8203.1] mlx5_core 0000:5e:00.1 enp94s0f1: TX timeout detected",
             "[ 8203.2] mlx5_core 0000:5e:00.1: print_health_info:435:(pid 0): Unrecoverable hardware error"]
    assert [e.attrs["severity"] for _, e in events(lines)] == ["warning", "fatal"]


def test_an_apei_record_is_one_machine_check_event() -> None:
    lines = ["[11219.196524] {1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1",
             "[11219.196558] {1}[Hardware Error]: event severity: recoverable",
             "[11219.196576] {1}[Hardware Error]:  Error 0, type: recoverable",
             "[11219.196591] {1}[Hardware Error]:   section_type: PCIe error",
             "[11219.196673] mce: [Hardware Error]: Machine check events logged"]
    assert [(n, e.kind, e.attrs, e.message.count(" | ")) for n, e in events(lines)] == [
        (1, LogKind.MCE, {"severity": "recoverable"}, 3), (5, LogKind.MCE, {}, 0)]


# ------------------------------------------------------------------------------------------------ bounds
def test_a_continuation_more_than_gap_s_after_the_first_line_is_not_joined() -> None:
    late = [MLX5_HEALTH[0], MLX5_HEALTH[1].replace("8203.117660", "8205.000000")]
    [(_, event)] = events(late)
    assert " | " not in event.message
    assert default_patterns().join.gap_s == 1.0


def test_a_report_takes_at_most_max_lines_continuations_and_max_bytes() -> None:
    join = default_patterns().join
    dump = [MLX5_HEALTH[0]] + [f"mlx5_core 0000:5e:00.1: print_health_info:435:(pid 0): assert_var[{i}] 0x0"
                               for i in range(join.max_lines + 20)]
    [(_, event)] = events(dump)
    assert event.message.count(" | ") == join.max_lines
    long_dump = [MLX5_HEALTH[0]] + [f"mlx5_core 0000:5e:00.1: print_health_info: {'x' * 500} {i}" for i in range(40)]
    [(_, event)] = events(long_dump)
    assert len(event.message) <= join.max_bytes and event.message.count(" | ") == 7  # 8 lines fit in 4096


def test_an_indented_line_continues_only_the_line_just_before_it() -> None:
    assert events(["   [ 0] RxErr"]) == []  # nothing open: nothing to continue, no event
    lines = [AER_PORT_PRINTS_ALL[0], "[  418.221305] usb 1-1: new high-speed USB device number 2",
             "[  418.221306]    [ 0] RxErr"]
    [(_, event)] = events(lines)
    assert " | " not in event.message


def test_interleaved_reports_are_joined_apart_and_come_out_in_the_order_they_began() -> None:
    gpus = [f"0000:{bus:02x}:00" for bus in (0x1b, 0x3b, 0x86, 0xbc)]
    warp = "NVRM: Xid (PCI:{}): 13, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address"
    esr = "NVRM: Xid (PCI:{}): 13, Graphics Exception: ESR 0x504648=0x102000e"
    joined = events([warp.format(g) for g in gpus] + [esr.format(g) for g in reversed(gpus)])
    assert [(n, e.pci_bus_id, e.message.count(" | ")) for n, e in joined] == [
        (i + 1, g, 1) for i, g in enumerate(gpus)]


def test_a_storm_of_reports_streams_out_without_being_held_back() -> None:
    """20,000 one-line reports from 200 devices: every one comes out, and at most max_open wait at any time."""
    lines = (f"mlx5_core 0000:{i % 200:02x}:00.0: mlx5_load_one failed with error code -22" for i in range(20_000))
    fed = 0

    def counted() -> Iterator[str]:
        nonlocal fed
        for line in lines:
            fed += 1
            yield line

    waiting = []
    for count, (number, _) in enumerate(join_lines(counted(), NODE, REF), 1):
        waiting.append(fed - number)  # lines read since this report began, when it came out
        assert count == number  # in the order they began
    assert len(waiting) == 20_000 and max(waiting) <= default_patterns().join.max_open


def test_a_storm_in_a_tailed_file_is_read_at_most_max_lines_per_read(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    source = KmsgSource(str(log), node=NODE, clock=ManualClock(REF), max_lines=90)
    source.read()
    with log.open("a") as handle:
        for i in range(250):  # 250 four-line AER reports, 1 ms apart: 1000 lines
            for line in AER_PORT_PRINTS_ALL:
                handle.write(line.replace("418.2213", f"{418 + i / 1000:.3f}2") + "\n")
    reads = [source.read() for _ in range(14)]
    # 90 lines per read: 12 reads. Reports are joined within a read; a report a read cuts after its detail line
    # loses its indented status and bit lines (nothing open to continue at the next read), never its event.
    assert [bool(r) for r in reads] == [True] * 12 + [False] * 2
    assert sum(len(r) for r in reads) == 250
    assert all(e.kind is LogKind.PCIE_AER and e.pci_bus_id == "0000:17:00.0" for r in reads for e in r)


def test_a_tailed_syslog_file_gives_its_lines_wall_clock_time_and_dmesg_lines_the_read_time(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    clock = ManualClock(REF)
    source = KmsgSource(str(log), node=NODE, clock=clock)
    source.read()
    log.write_text(f"Dec  7 12:00:01 gpu-node-001 kernel: [  219.4] {XID}\n[  220.1] {XID.replace('3b', '86')}\n")
    assert [e.ts for e in source.read()] == [LOCAL, REF]


# ------------------------------------------------------------------------------------------------ the table
def test_a_bad_join_or_time_entry_names_the_entry_at_fault() -> None:
    with pytest.raises(ConfigError, match=r"prefix\[0\]: a \(\?P<time>...\) group and a time key go together"):
        load_patterns("[[prefix]]\nregex = '^(?P<time>\\d+) '\n")
    with pytest.raises(ConfigError, match=r"rule\[0\]: pci/keys name group\(s\) \['dev'\]"):
        load_patterns("[[rule]]\nkind = 'nic'\nregex = 'x'\npci = 'dev'\n")
    with pytest.raises(ConfigError, match=r"join: unknown key\(s\) \['gap'\]"):
        load_patterns("[join]\ngap = 2\n")
    with pytest.raises(ConfigError, match=r"rule\[0\]\.continues\.regex"):
        load_patterns("[[rule]]\nkind = 'nic'\nregex = 'x'\ncontinues = '('\n")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([line for _, line, _ in FORMATS] + AER_PORT_PRINTS_ALL + AER_DEVICE_PRINTS_DETAIL
                                + MLX5_HEALTH + ["   indented", "unrelated line", ""]) | st.text(max_size=80),
                max_size=60))
def test_any_lines_join_into_events_the_codec_accepts(lines: list[str]) -> None:
    joined = events(lines)
    assert len(joined) <= len(lines) and [n for n, _ in joined] == sorted(n for n, _ in joined)
    for _, event in joined:
        assert len(event.message) <= 4096 and codec.decode_as(codec.encode(event), LogEvent) == event


# ------------------------------------------------------------------------------------------------ the CLI
MIXED = [  # (line, kind, code, pci); None: a continuation line or a line that is no event
    ("3,1042,9329702794,-;NVRM: Xid (PCI:0000:1b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
     "double bit error (DBE) has been detected on GPU in the framebuffer at partition 1, subpartition 0.",
     "xid", 48, "0000:1b:00"),
    ("[   12.345678] NVRM: Xid (PCI:0000:3b:00): 13, pid=2044, name=python3, Graphics SM Warp Exception on "
     "(GPC 0, TPC 0, SM 0): Out Of Range Address", "xid", 13, "0000:3b:00"),
    ("[   12.345690] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception: ESR 0x504648=0x102000e 0x504650=0x0",
     None, None, None),
    ("[123] NVRM: Xid (PCI:0000:5d:00): 94, pid=2044, name=python3, Contained ECC error", "xid", 94, "0000:5d:00"),
    ("[Mon Dec  7 12:00:01 2026] NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
     "off the bus.", "xid", 79, "0000:86:00"),
    ("Dec 07 12:00:02 gpu-node-001 kernel: NVRM: Xid (PCI:0000:bc:00): 64, pid='<unknown>', name=<unknown>, "
     "Dynamic Page Retirement: Blacklisting failed.", "xid", 64, "0000:bc:00"),
    ("2026-12-07T12:00:03+0000 gpu-node-001 kernel: NVRM: Xid (PCI:0000:c1:00): 119, pid=10200, "
     "name=NvmlTaskRunner, Timeout after 45s of waiting for RPC response from GPU5 GSP!", "xid", 119, "0000:c1:00"),
    ("Dec 07 12:00:04.123456 gpu-node-001 kernel: NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 "
     "Link 13 (0x0409a0c2 0x00000008)", "xid", 145, "0018:01:00"),
    ("<4>Dec  7 12:00:05 gpu-node-001 kernel: nvidia-nvswitch3: SXid (PCI:0000:c7:00.0): 20034, Fatal, Link 46 "
     "LTSSM Fault Up", "sxid", 20034, "0000:c7:00.0"),
    ("<4>1 2026-12-07T12:00:06.123456+00:00 gpu-node-001 kernel - - - nvidia-nvswitch0: SXid (PCI:0000:05:00.0): "
     "12028, Non-fatal, Link 08 egress non-posted PRIV error (First)", "sxid", 12028, "0000:05:00.0"),
    ("<4>1 2026-12-07T12:00:06.123460+00:00 gpu-node-001 kernel - - - nvidia-nvswitch0: SXid (PCI:0000:05:00.0): "
     "12028, Severity 0 Engine instance 08 Sub-engine instance 00", None, None, None),
    ("<4>1 2026-12-07T12:00:06.123470+00:00 gpu-node-001 kernel - - - nvidia-nvswitch0: SXid (PCI:0000:05:00.0): "
     "12028, Data {0x00000000, 0x00000000, 0x00000000, 0x00000000}", None, None, None),
    *((line, "pcie_aer" if i == 0 else None, None, "0000:17:00.0" if i == 0 else None)
      for i, line in enumerate(AER_PORT_PRINTS_ALL)),
    ("Dec 07 12:00:07 gpu-node-001 systemd[1]: Started Session 4 of user root.", None, None, None),
    ("<13>Dec  7 12:00:08 gpu-node-001 kernel: NVRM: Xid (PCI:0000:1b:00): 48, echoed by logger", None, None, None),
]


def sentinel_cli() -> list[str]:
    """The installed console script beside this interpreter (what an operator runs), else the module."""
    script = Path(sys.executable).with_name("sentinel")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sentinel.cli"]


def test_parse_log_json_recognises_every_format_and_joins_reports(tmp_path: Path) -> None:
    # A file name a shell would run three commands from: argv reaches the program as it is, through no shell.
    log = tmp_path / "kern $(touch pwned) `touch pwned2`; touch pwned3 #.log"
    log.write_text("".join(line + "\n" for line, *_ in MIXED), encoding="utf-8")
    env = {**os.environ, "TZ": "UTC"}
    result = subprocess.run([*sentinel_cli(), "parse-log", str(log), "--output", "json"], capture_output=True,
                            text=True, timeout=120, env=env, cwd=tmp_path, shell=False, check=False)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [log.name]  # no "pwned*" file: nothing ran
    out = [json.loads(line) for line in result.stdout.splitlines()]
    expected = [(number, kind, code, pci) for number, (_, kind, code, pci) in enumerate(MIXED, 1) if kind]
    got = [(e["line"], e["kind"], e["xid"] if e["kind"] == "xid" else int(e["attrs"]["sxid"]), e["pci"])
           for e in out if e["kind"] != "pcie_aer"]
    got += [(e["line"], e["kind"], None, e["pci"]) for e in out if e["kind"] == "pcie_aer"]
    assert sorted(got) == expected
    by_line = {e["line"]: e for e in out}
    assert "Graphics Exception: ESR" in by_line[2]["message"]  # the continuation is in its report, not an event
    sxid = by_line[10]
    assert (sxid["attrs"]["severity"], sxid["attrs"]["link"], sxid["attrs"]["engine"], sxid["severity"]) == (
        "Non-fatal", "8", "8", "nonfatal")
    assert by_line[9]["severity"] == "fatal" and by_line[9]["attrs"]["link"] == "46"
    assert by_line[13]["attrs"]["type"] == "Physical Layer" and by_line[13]["message"].endswith("RxErr")
    assert f"{len(expected)} event(s) recognised in {len(MIXED)} line(s)" in result.stderr
