"""KmsgSource: tailing /dev/kmsg or a log file without blocking, losing or repeating lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sentinel.clock import ManualClock
from sentinel.errors import CollectorError
from sentinel_collectors.kmsg_source import MAX_LINE_BYTES, KmsgSource

NODE, TS = "gpu-node-001", 1_767_225_600.0
# ------------------------------------------------------------------------------------------------ KmsgSource


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


XID = "[  1.0] NVRM: Xid (PCI:0000:65:00): {code}, pid=1, name=python3, test\n"


def test_a_tailed_file_yields_each_appended_line_once(tmp_path: Path) -> None:
    log, clock = tmp_path / "kern.log", ManualClock()
    log.write_text(XID.format(code=48))  # history: not replayed
    source = KmsgSource(str(log), node=NODE, clock=clock)
    assert source.name == "kmsg" and source.read() == []
    append(log, XID.format(code=79) + "some unrelated line\n" + XID.format(code=64))
    clock.advance(10)
    events = source.read()
    assert [e.xid for e in events] == [79, 64] and all(e.ts == clock.now() for e in events)
    assert source.read() == []
    append(log, XID.format(code=95))
    assert [e.xid for e in source.read()] == [95]


def test_from_start_reads_the_lines_already_in_the_file(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(XID.format(code=48) + XID.format(code=79))
    assert [e.xid for e in KmsgSource(str(log), node=NODE, clock=ManualClock(), from_start=True).read()] == [48, 79]


def test_a_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    source = KmsgSource(str(log), node=NODE, clock=ManualClock())
    source.read()
    line = XID.format(code=79)
    append(log, line[:25])
    assert source.read() == []
    append(log, line[25:-1])
    assert source.read() == []
    append(log, "\n")
    [event] = source.read()
    assert event.xid == 79 and event.message == line[line.index("NVRM") : -1]


def test_a_line_that_never_ends_is_cut_rather_than_buffered_without_bound(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    source = KmsgSource(str(log), node=NODE, clock=ManualClock())
    source.read()
    append(log, "NVRM: Xid (PCI:0000:65:00): 13, " + "x" * (MAX_LINE_BYTES + 100))
    [event] = source.read()  # the first MAX_LINE_BYTES come out as one line; the rest waits as a partial line
    assert event.xid == 13 and len(event.message) == 4096
    append(log, "\n" + XID.format(code=79))
    assert [e.xid for e in source.read()] == [79]


def test_a_truncated_file_is_read_again_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(XID.format(code=13) * 5)
    source = KmsgSource(str(log), node=NODE, clock=ManualClock())
    source.read()
    log.write_text(XID.format(code=62))  # copytruncate, then one new line: shorter than our offset
    assert [e.xid for e in source.read()] == [62]


def test_a_rotated_file_is_finished_and_the_new_one_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    source = KmsgSource(str(log), node=NODE, clock=ManualClock())
    source.read()
    append(log, XID.format(code=48))
    log.rename(tmp_path / "kern.log.1")
    log.write_text(XID.format(code=79))
    assert [e.xid for e in source.read()] == [48, 79]


def test_a_missing_or_unreadable_source_raises_collector_error(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="kmsg: cannot read .*missing.log"):
        KmsgSource(str(tmp_path / "missing.log"), node=NODE, clock=ManualClock()).read()
    with pytest.raises(CollectorError, match="neither a character device nor a regular file"):
        KmsgSource(str(tmp_path), node=NODE, clock=ManualClock()).read()


def test_one_read_is_bounded_and_the_rest_comes_next_time(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    source = KmsgSource(str(log), node=NODE, clock=ManualClock(), max_lines=100)
    source.read()
    append(log, XID.format(code=13) * 250)
    assert [len(source.read()) for _ in range(4)] == [100, 100, 50, 0]


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg is not readable here")
def test_live_dev_kmsg_reads_without_blocking_or_replaying_the_boot() -> None:
    source = KmsgSource(node=NODE, clock=ManualClock())
    replay = KmsgSource(node=NODE, clock=ManualClock(), from_start=True)
    try:
        first = source.read()  # starts at the end: the boot's Xids (if any) are history
        second = source.read()
        whole_ring = replay.read()  # every record still in the ring goes through the record-format parser
    except CollectorError as exc:  # e.g. a container that lists /dev/kmsg but denies reading it
        pytest.skip(str(exc))
    finally:
        source.close()
        replay.close()
    assert all(isinstance(events, list) for events in (first, second, whole_ring)) and source.overruns >= 0


def test_a_restarted_source_reads_what_was_logged_while_it_was_down(tmp_path: Path) -> None:
    from sentinel.clock import ManualClock

    log, state = tmp_path / "kern.log", str(tmp_path / "kmsg.position")
    log.write_text("old line before the agent ever ran\n")
    first = KmsgSource(str(log), node="n1", clock=ManualClock(), state_path=state)
    assert first.read() == []  # first start: skips what was already there
    with log.open("a") as handle:
        handle.write("kernel: NVRM: Xid (PCI:0000:65:00): 79, pid='<unknown>', GPU has fallen off the bus.\n")
    assert [e.xid for e in first.read()] == [79]
    first.close()
    with log.open("a") as handle:  # logged while the agent was down
        handle.write("kernel: NVRM: Xid (PCI:0000:65:00): 48, pid=1, name=python, DBE\n")
    second = KmsgSource(str(log), node="n1", clock=ManualClock(), state_path=state)
    assert [e.xid for e in second.read()] == [48]  # not 79 again, and 48 not lost
    second.close()


def test_the_kernel_ring_position_survives_a_restart_on_this_boot(tmp_path: Path) -> None:
    import os

    from sentinel.clock import ManualClock

    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    state = str(tmp_path / "kmsg.position")
    first = KmsgSource("/dev/kmsg", node="n1", clock=ManualClock(), state_path=state)
    first.read()
    first.close()
    saved = Path(state).read_text().split()
    assert len(saved) == 2 and saved[1].isdigit()
    second = KmsgSource("/dev/kmsg", node="n1", clock=ManualClock(), state_path=state)
    second.read()
    assert second.last_seq is not None and second.last_seq >= int(saved[1])
    second.close()
