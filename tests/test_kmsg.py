"""The kernel-log collector recognises real Xid, GSP, AER, NIC and MCE lines in every log format, and tails its
source without blocking, replaying or losing lines."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import codec
from sentinel.errors import ConfigError
from sentinel.events import LogEvent, LogKind
from sentinel_collectors.kmsg import load_patterns, parse_line

NODE, TS = "gpu-node-001", 1_767_225_600.0
# Written independently of the pattern table: what any reader of an Xid line would take from it.
XID_LINE = re.compile(r"NVRM: Xid \(PCI:([^)]+)\): (\d+),")


def data_lines(path: Path) -> list[tuple[str, str]]:
    """(fmt, line) for every log line of a shared data file, fmt from the block's ``## fmt:`` header."""
    fmt, out = "", []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## fmt:"):
            fmt = line.removeprefix("## fmt:").split()[0]
        elif line.strip() and not line.startswith("#"):
            out.append((fmt, line))
    return out


def parse(line: str) -> LogEvent | None:
    return parse_line(line, NODE, TS)


def wall_clock(fmt: str, line: str) -> float:
    """The time an event from this data line carries: the line's own wall-clock time (local time; a syslog
    line's year is the last one before TS, 2026-01-01) unless that is after TS (a misread year or zone), else the
    reader's clock TS."""
    when = TS
    if fmt == "dmesg-T":
        when = datetime.strptime(line[1 : line.index("]")], "%a %b %d %H:%M:%S %Y").timestamp()
    elif fmt == "syslog":
        when = datetime.strptime("2025 " + line[:15], "%Y %b %d %H:%M:%S").timestamp()
    return when if when <= TS + 300 else TS


def test_every_xid_line_in_the_data_parses_with_its_code_and_pci_id_as_written(data_dir: Path) -> None:
    lines = [(fmt, line) for fmt, line in data_lines(data_dir / "xid_lines.txt") if "NVRM: Xid (" in line]
    assert len(lines) >= 58  # the file's count on writing; an empty or truncated file cannot pass
    per_format: Counter[str] = Counter()
    for fmt, line in lines:
        expected = XID_LINE.search(line)
        assert expected, line
        event = parse(line)
        assert event is not None and event.kind is LogKind.XID, line
        assert (event.xid, event.pci_bus_id) == (int(expected.group(2)), expected.group(1)), line
        assert event.message.startswith("NVRM: Xid (") and event.message == line[line.index("NVRM: Xid (") :]
        assert (event.node, event.ts) == (NODE, wall_clock(fmt, line))
        per_format[fmt] += 1
    assert set(per_format) == {"dmesg-raw", "dmesg-T", "syslog", "kernel-prefix", "bare"}


def test_lines_in_the_xid_file_that_are_not_xid_lines_never_yield_an_xid_event(data_dir: Path) -> None:
    others = [line for _, line in data_lines(data_dir / "xid_lines.txt") if "NVRM: Xid (" not in line]
    assert len(others) >= 15
    for line in others:
        event = parse(line)
        assert event is None or event.kind is not LogKind.XID, line


def test_no_kernel_fault_line_yields_an_xid_event(data_dir: Path) -> None:
    lines = data_lines(data_dir / "kernel_fault_lines.txt")
    assert len(lines) >= 40  # 42 on writing
    for _, line in lines:
        event = parse(line)
        assert event is None or event.kind is not LogKind.XID, line


# (a distinctive piece of one kernel_fault_lines.txt line, expected kind, attrs that must be present)
FAULT_EXPECTATIONS: list[tuple[str, LogKind, dict[str, str]]] = [
    ("Heartbeat timed out", LogKind.GSP, {"event": "heartbeat_timeout", "gpu_instance": "6"}),
    ("_kgspLogRpcTimeout: *****", LogKind.GSP, {"event": "rpc_timeout"}),
    ("Memory Subsystem Error detected", LogKind.GSP, {"event": "memsys_error"}),
    ("GspRmAlloc failed", LogKind.GSP, {"event": "rpc_failed", "function": "rpcRmApiAlloc_GSP"}),
    ("Reset required [NV_ERR_RESET_REQUIRED]", LogKind.GSP, {"event": "reset_required"}),
    ("AER: Corrected error received", LogKind.PCIE_AER, {"severity": "corrected", "device": "0000:00:03.0"}),
    ("PCIe Bus Error: severity=Corrected", LogKind.PCIE_AER, {"severity": "corrected", "type": "Data Link Layer"}),
    ("Responder error cqe", LogKind.NIC, {"severity": "warning", "device": "rocep33s0f0"}),
    ("mlx5_load_one failed", LogKind.NIC, {"severity": "fatal", "device": "0000:03:00.0"}),
    ("probe of 0000:03:00.0 failed", LogKind.NIC, {"severity": "fatal", "device": "0000:03:00.0"}),
    ("handle_hca_cap failed", LogKind.NIC, {"severity": "warning", "device": "0000:03:00.0"}),
    ("EDAC MC3: 1 UE", LogKind.MCE, {"severity": "uncorrected", "controller": "MC3", "count": "1"}),
    ("EDAC MC0: 4 CE", LogKind.MCE, {"severity": "corrected", "count": "4"}),
    ("Hardware error from APEI", LogKind.MCE, {}),
    ("event severity: recoverable", LogKind.MCE, {"severity": "recoverable"}),
    ("mce: [Hardware Error]: Machine check events logged", LogKind.MCE, {}),
]

# Healthy or merely informational lines from the same file: no event.
FAULT_NEGATIVES = [
    "Link INIT", "Link ACTIVE", "firmware version:", "available PCIe bandwidth", "Cable plugged",
    "sufficient power", "enabling device", "hogged CPU", "loading NVIDIA UNIX Open Kernel Module",
]


def test_kernel_fault_lines_are_classified_by_what_they_report(data_dir: Path) -> None:
    lines = [line for _, line in data_lines(data_dir / "kernel_fault_lines.txt")]
    for needle, kind, attrs in FAULT_EXPECTATIONS:
        matching = [line for line in lines if needle in line]
        assert matching, f"no data line contains {needle!r}"
        for line in matching:
            event = parse(line)
            assert event is not None and event.kind is kind, line
            assert attrs.items() <= event.attrs.items(), (line, event.attrs)
    for needle in FAULT_NEGATIVES:
        matching = [line for line in lines if needle in line]
        assert matching and all(parse(line) is None for line in matching), needle


def test_each_fault_block_yields_only_its_own_kind(data_dir: Path) -> None:
    """Every event from a block about X is of kind X (lines the table does not know may yield nothing)."""
    text = (data_dir / "kernel_fault_lines.txt").read_text(encoding="utf-8")
    blocks = {"open-gpu-kernel-modules/issues/1230": LogKind.GSP, "sichek/issues/51": LogKind.GSP,
              "returnn/issues/1486": LogKind.PCIE_AER, "nvme-cli/issues/3268": LogKind.NIC,
              "tinycore-redpill/issues/9": LogKind.NIC, "openstreetmap/operations/issues/300": LogKind.MCE}
    for block in text.split("## source: ")[1:]:
        kind = next((k for source, k in blocks.items() if source in block.splitlines()[0]), None)
        if kind is None:
            continue
        events = [parse(line) for line in block.splitlines()[1:] if line.strip() and not line.startswith("#")]
        kinds = {e.kind for e in events if e is not None}
        assert kinds == {kind}, block.splitlines()[0]


def test_mlx5_fatal_and_warning_patterns_carry_severity_and_device() -> None:
    cases = {
        "[ 1.0] mlx5_core 0000:86:00.0: poll_health:735:(pid 0): device's health compromised - reached miss count":
            ("fatal", "0000:86:00.0"),
        "kernel: mlx5_core 0000:3b:00.0: wait_func:964:(pid 12): ACCESS_REG(0x805) timeout. Will cause a leak of a "
        "command resource": ("fatal", "0000:3b:00.0"),
        "mlx5_core 0000:5e:00.1: print_health_info:435:(pid 0): Unrecoverable hardware error":
            ("fatal", "0000:5e:00.1"),
        "[Mon Mar  6 21:34:31 2023] NETDEV WATCHDOG: enp2s0f0 (mlx5_core): transmit queue 3 timed out":
            ("warning", "enp2s0f0"),
        "mlx5_core 0000:02:00.0 enp2s0f0: TX timeout detected": ("warning", "0000:02:00.0"),
        "mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN": ("warning", "0000:ab:00.0"),
    }
    for line, (severity, device) in cases.items():
        event = parse(line)
        assert event is not None and event.kind is LogKind.NIC, line
        assert (event.attrs["severity"], event.attrs["device"]) == (severity, device), line


def test_dev_kmsg_records_parse_and_userspace_records_are_dropped() -> None:
    event = parse("3,1042,9329702794,-;NVRM: Xid (PCI:0000:65:00): 79, pid='<unknown>', name=<unknown>, "
                  "GPU has fallen off the bus.")
    assert event is not None and (event.kind, event.xid, event.pci_bus_id) == (LogKind.XID, 79, "0000:65:00")
    assert event.message.startswith("NVRM: Xid") and event.attrs == {"pid": "<unknown>", "process": "<unknown>"}
    aer = parse("4,2210,11219196558,c,caller=T12;pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: "
                "0000:01:00.0")
    assert aer is not None and aer.kind is LogKind.PCIE_AER
    assert aer.attrs["severity"] == "fatal" and aer.attrs["device"] == "0000:01:00.0"
    # facility 3 (daemon): a userspace program wrote this into /dev/kmsg; it is not the driver speaking
    assert parse("30,1043,9329702800,-;NVRM: Xid (PCI:0000:65:00): 79, copied by a daemon") is None


def test_nvlink5_xids_carry_unit_severity_and_link() -> None:
    event = parse("NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)")
    assert event is not None and event.xid == 145
    assert event.attrs == {"unit": "RLW_RXPIPE", "severity": "Nonfatal", "link": "13"}
    padded = parse("NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x0)")
    assert padded is not None and padded.attrs == {"unit": "NETIR_LINK_EVT", "severity": "Fatal", "link": "0"}
    no_link = parse("NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000)")
    assert no_link is not None and no_link.attrs == {"unit": "NETIR", "severity": "Fatal"}
    # outside 144-150 the same words are not decoded as an NVLink5 sub-code
    other = parse("NVRM: Xid (PCI:0000:01:00): 74, SAW_MVB Nonfatal XC0 i0 Link 3 (0x1)")
    assert other is not None and other.attrs == {}


def test_pid_and_process_attrs_are_taken_when_the_line_has_them() -> None:
    cases = {
        "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008": {
            "pid": "1797828", "process": "pt_main_thread"},
        "NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error": {
            "pid": "<unknown>", "process": "<unknown>"},
        "NVRM: Xid (PCI:0000:65:00): 64, pid='N/A', name=N/A, row remap failure": {"pid": "N/A", "process": "N/A"},
        "NVRM: Xid (PCI:0000:3d:00): 43, pid=35521, Ch 00000008": {"pid": "35521"},
        "NVRM: Xid (PCI:0000:70:00): 13, Graphics SM Warp Exception on (GPC 1, TPC 1, SM 1): MMU Fault": {},
    }
    for line, attrs in cases.items():
        event = parse(line)
        assert event is not None and event.attrs == attrs, line


def test_an_xid_code_no_table_lists_still_parses() -> None:
    event = parse("[  12.5] NVRM: Xid (PCI:0000:65:00): 4242, a code from a future driver")
    assert event is not None and (event.kind, event.xid) == (LogKind.XID, 4242)
    assert parse("NVRM: Xid (PCI:0000:65:00): 99999, not a code LogEvent can carry") is None


def test_more_log_formats_are_recognised() -> None:
    xid = "NVRM: Xid (PCI:0000:65:00): 48, pid=1, name=x, DBE"
    for prefix in ["2026-01-01T00:00:00.123456+00:00 node7 kernel: ", "2026-01-01T00:00:00+0000 node7 kernel: ",
                   "kern  :err   : [  219.4] ", "[  +0.000316] ", "[Jan11 09:52] ", "2026-01-01T00:00:00,123456+00:00 ",
                   "Dec  2 11:38:47 worker4 kernel: ", "kernel: [ 5.1] "]:
        event = parse(prefix + xid)
        assert event is not None and (event.xid, event.message) == (48, xid), prefix


def test_other_programs_lines_in_syslog_are_not_kernel_events() -> None:
    """A daemon that echoes an Xid into syslog must not count as a second Xid."""
    assert parse("Dec  2 11:38:47 worker4 gpud[811]: NVRM: Xid (PCI:0000:07:00): 48, seen by gpud") is None
    assert parse("2026-01-01T00:00:00+00:00 worker4 nv-hostengine: NVRM: Xid (PCI:0000:07:00): 48, x") is None
    assert parse("user  :info  : NVRM: Xid (PCI:0000:07:00): 48, logger test") is None


def test_non_xid_nvrm_lines_are_not_xid_events() -> None:
    for line in ["NVRM: _kgspLogXid119: Note: Please also check logs above.",
                 "NVRM: GPU at PCI:0000:db:00: GPU-4a28de72-2645-de9a-eb35-a394cef3f4da",
                 "[Mon Mar  6 21:34:31 2023] NVRM: Xid119 mentioned in passing (PCI:0000:61:00): 119,"]:
        event = parse(line)
        assert event is None or event.kind is not LogKind.XID, line


def test_a_new_format_and_a_new_rule_are_table_entries_not_code() -> None:
    patterns = load_patterns(r"""
[defs]
dev = 'gpu\d+'
[[prefix]]
regex = '^<\d+>'
[[rule]]
kind = "other"
regex = '^fabricmanager: (?P<device>{{dev}}) lost'
attrs = { severity = "warning" }
""")
    event = parse_line("<3>fabricmanager: gpu7 lost", NODE, TS, patterns)
    assert event is not None and event.kind is LogKind.OTHER
    assert event.attrs == {"severity": "warning", "device": "gpu7"} and event.message == "fabricmanager: gpu7 lost"


def test_a_bad_pattern_table_names_the_entry_at_fault() -> None:
    with pytest.raises(ConfigError, match=r"rule\[0\]\.kind: must be one of .*xid.*got 'oops'"):
        load_patterns("[[rule]]\nkind = 'oops'\nregex = 'x'\n")
    with pytest.raises(ConfigError, match=r"prefix\[0\]\.regex"):
        load_patterns("[[prefix]]\nregex = '('\n")
    with pytest.raises(ConfigError, match=r"rule\[0\]: unknown key\(s\) \['atrs'\]"):
        load_patterns("[[rule]]\nkind = 'nic'\nregex = 'x'\natrs = { severity = 'fatal' }\n")
    with pytest.raises(ConfigError, match=r"rule\[0\]\.regex: missing"):
        load_patterns("[[rule]]\nkind = 'nic'\n")


def test_every_event_from_the_data_survives_the_wire_codec(data_dir: Path) -> None:
    events = [e for name in ("xid_lines.txt", "kernel_fault_lines.txt")
              for _, line in data_lines(data_dir / name) if (e := parse(line)) is not None]
    assert len(events) > 80
    for event in events:
        assert codec.decode_as(codec.encode(event), LogEvent) == event


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300) | st.from_regex(r"\A\[ *\d+\.\d+\] NVRM: Xid \(PCI:[0-9a-f:]{0,80}\): \d{1,7}, .*"))
def test_any_text_yields_none_or_an_event_the_codec_accepts(line: str) -> None:
    event = parse(line)
    assert event is None or codec.decode_as(codec.encode(event), LogEvent) == event


def test_an_overlong_line_is_cut_to_what_the_wire_allows() -> None:
    event = parse("NVRM: Xid (PCI:0000:65:00): 13, " + "x" * 10_000)
    assert event is not None and len(event.message) == 4096
