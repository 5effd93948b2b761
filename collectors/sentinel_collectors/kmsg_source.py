"""Kernel-log source: the lines of ``/dev/kmsg`` (or of a tailed file) since the previous read, as events.

``KmsgSource`` reads without blocking, at most ``max_lines`` lines per ``read()`` so a log storm cannot stall the
agent. On its first open it starts at the *end*: the boot's old messages (and a file's old lines) are not
replayed, because replaying an Xid that was handled before an agent restart would act on it twice; with
``state_path`` the position survives restarts. What a line means is ``sentinel_collectors.kmsg``'s business.
"""

from __future__ import annotations

import os
import stat
from typing import IO

from sentinel.clock import Clock
from sentinel.errors import CollectorError
from sentinel.events import LogEvent
from sentinel_collectors.kmsg import Patterns, default_patterns, join_lines

MAX_LINE_BYTES = 64 * 1024  # a longer "line" is cut here rather than buffered without bound
_KMSG_RECORD_BYTES = 16 * 1024  # one read() returns one record (kernel cap 8 KiB); too small a buffer is EINVAL


class KmsgSource:
    """Kernel-log events since the previous ``read()``, from ``/dev/kmsg`` or a tailed regular file.

    ``/dev/kmsg`` (a character device) is opened non-blocking and read one record per ``os.read`` until EAGAIN;
    EPIPE means the ring overwrote records we had not read yet: counted in ``overruns``, reading goes on from the
    oldest record left. A regular file is tailed by offset: a partial last line waits for its newline, and a file
    that got shorter (truncated) or was replaced (rotated: new inode) is read from its start; the rest of a rotated
    file is read first. ``from_start=True`` reads a file's existing lines on the first read (tests, replay).
    """

    name = "kmsg"

    def __init__(self, path: str = "/dev/kmsg", *, node: str, clock: Clock, max_lines: int = 10_000,
                 from_start: bool = False, patterns: Patterns | None = None, state_path: str | None = None) -> None:
        """``state_path``: where the read position is kept across agent restarts (the /dev/kmsg sequence number
        with the boot id, or a file's inode and offset), so lines logged while the agent was down are read when
        it comes back instead of being skipped. Without it, a new source starts at the end."""
        self.path, self.node, self.clock, self.max_lines = path, node, clock, max_lines
        self.state_path = state_path
        self.last_seq: int | None = None
        self.patterns = patterns or default_patterns()
        self.overruns = 0
        self._from_start = from_start
        self._kmsg_fd: int | None = None
        self._file: IO[bytes] | None = None
        self._inode: int | None = None
        self._partial = b""

    def read(self) -> list[LogEvent]:
        """Events from the lines that appeared since the previous call; never blocks. Raises CollectorError."""
        try:
            info = os.stat(self.path)
            if stat.S_ISCHR(info.st_mode):
                lines = self._read_kmsg()
            elif stat.S_ISREG(info.st_mode):
                lines = self._read_file(info)
            else:
                raise CollectorError(f"kmsg: {self.path} is neither a character device nor a regular file")
        except OSError as exc:
            raise CollectorError(f"kmsg: cannot read {self.path}: {exc.strerror or exc}") from None
        # One read's lines: a report is joined within one read (a read that ends inside a report, at max_lines
        # or while the driver is still printing it, leaves the rest to start afresh next time).
        return [event for _, event in join_lines(lines, self.node, self.clock.now(), self.patterns)]

    def _read_kmsg(self) -> list[str]:
        resume: int | None = -1  # keep records with a sequence number above this; None: skip what is there now
        limit = self.max_lines
        if self._kmsg_fd is None:
            self._kmsg_fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            saved = self._load_state()
            if saved is not None and saved[0] == _boot_id():
                resume = int(saved[1])  # same boot: pick up after the last record we read
            elif not self._from_start:
                resume = None  # first start (or a new boot's ring we never saw): skip the records already there
            limit = max(limit, 1_000_000)  # one pass over the whole ring to find our place
        elif self.last_seq is not None:
            resume = self.last_seq
        lines: list[str] = []
        for _ in range(limit):  # bounded even if every read were an overrun
            try:
                record = os.read(self._kmsg_fd, _KMSG_RECORD_BYTES)
            except BlockingIOError:
                break  # EAGAIN: nothing more for now
            except BrokenPipeError:  # EPIPE: the kernel already moved us to the oldest record it still has
                self.overruns += 1
                continue
            if not record:
                break
            # A record is "prefix;message\n" followed by " KEY=value" dictionary lines: keep the first line.
            line = record.split(b"\n", 1)[0].decode("utf-8", errors="replace")
            seq = _record_seq(line)
            if seq is not None:
                if resume is None or seq <= resume:
                    self.last_seq = max(self.last_seq or -1, seq)
                    continue
                self.last_seq = seq
            lines.append(line)
            if len(lines) >= self.max_lines:
                break
        if self.last_seq is not None:
            self._save_state(_boot_id(), str(self.last_seq))
        return lines

    def _load_state(self) -> list[str] | None:
        if not self.state_path:
            return None
        try:
            with open(self.state_path, encoding="ascii") as handle:
                parts = handle.read().split()
        except (OSError, UnicodeDecodeError):
            return None
        return parts if len(parts) == 2 and parts[1].isdigit() else None

    def _save_state(self, first: str, second: str) -> None:
        if not self.state_path:
            return
        tmp = f"{self.state_path}.tmp"
        try:
            with open(tmp, "w", encoding="ascii") as handle:
                handle.write(f"{first} {second}\n")
            os.replace(tmp, self.state_path)  # atomic: a crash leaves the old or the new position
        except OSError as exc:
            raise CollectorError(f"kmsg: cannot save the read position to {self.state_path}: {exc}") from None

    def _read_file(self, info: os.stat_result) -> list[str]:
        lines: list[str] = []
        if self._file is not None and info.st_ino != self._inode:  # rotated: finish the old file first
            lines = self._drain(self._file, self.max_lines)
            if self._partial:  # its writer moved on to the new file: this line will not be finished
                lines.append(self._partial.decode("utf-8", errors="replace"))
            self._close_file()
            self._from_start = True
        if self._file is None:
            self._file = open(self.path, "rb")  # noqa: SIM115 - held open across reads on purpose
            self._inode = os.fstat(self._file.fileno()).st_ino
            saved = self._load_state()
            size = os.fstat(self._file.fileno()).st_size
            if saved is not None and saved[0] == str(self._inode) and int(saved[1]) <= size:
                self._file.seek(int(saved[1]))  # same file as before the restart: continue where we stopped
            elif not self._from_start:
                self._file.seek(0, os.SEEK_END)
            self._from_start = True  # every later (re)open is new content
        if os.fstat(self._file.fileno()).st_size < self._file.tell():  # truncated (e.g. copytruncate)
            self._file.seek(0)
            self._partial = b""
        lines += self._drain(self._file, self.max_lines - len(lines))
        self._save_state(str(self._inode), str(self._file.tell() - len(self._partial)))
        return lines

    def _drain(self, file: IO[bytes], limit: int) -> list[str]:
        lines: list[str] = []
        while len(lines) < limit:
            chunk = file.readline(MAX_LINE_BYTES - len(self._partial))
            if not chunk:
                break
            data = self._partial + chunk
            if not data.endswith(b"\n") and len(data) < MAX_LINE_BYTES:
                self._partial = data  # the writer has not finished this line yet
                break
            self._partial = b""
            lines.append(data.decode("utf-8", errors="replace"))
        return lines

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file, self._inode, self._partial = None, None, b""

    def close(self) -> None:
        self._close_file()
        if self._kmsg_fd is not None:
            os.close(self._kmsg_fd)
            self._kmsg_fd = None


def _record_seq(line: str) -> int | None:
    """The sequence number of a /dev/kmsg record ("pri,seq,ts_usec,flags;message")."""
    head, sep, _ = line.partition(";")
    fields = head.split(",")
    return int(fields[1]) if sep and len(fields) >= 2 and fields[1].isdigit() else None


def _boot_id() -> str:
    """/dev/kmsg sequence numbers restart at every boot: a saved position is only valid with its boot id."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return "unknown"
