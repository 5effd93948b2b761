"""Kernel-log collector: recognise Xid, GSP, PCIe AER, NIC (mlx5/InfiniBand) and machine-check lines.

Reads only: a line becomes a ``LogEvent`` or nothing; judging it is the detector's job. Log formats and
classification rules are data (``kmsg_patterns.toml``, loaded once): a new format or message is a table edit, and
the Xid code is read from the line, so an Xid number no table lists still parses.

``KmsgSource`` reads ``/dev/kmsg`` (or tails a regular file such as a syslog file, or a test file) without blocking,
at most ``max_lines`` lines per ``read()`` so a log storm cannot stall the agent. On its first open it starts at
the *end*: the boot's old messages (and a file's old lines) are not replayed, because replaying an Xid that was
handled before an agent restart would act on it twice. Lines written while the agent is down are therefore missed.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import IO, Any

from sentinel.clock import Clock
from sentinel.errors import CollectorError, ConfigError
from sentinel.events import LogEvent, LogKind

MAX_LINE_BYTES = 64 * 1024  # a longer "line" is cut here rather than buffered without bound
_KMSG_RECORD_BYTES = 16 * 1024  # one read() returns one record (kernel cap 8 KiB); too small a buffer is EINVAL
_FIELDS = ("xid", "pci_bus_id")  # named groups that fill LogEvent fields; every other group becomes an attr


@dataclass(frozen=True)
class Prefix:
    regex: re.Pattern[str]
    drop: bool  # a line of this shape is not a kernel message


@dataclass(frozen=True)
class Extract:
    regex: re.Pattern[str]
    xid: tuple[int, ...] | None  # (low, high): only for Xid codes in this inclusive range


@dataclass(frozen=True)
class Rule:
    kind: LogKind
    regex: re.Pattern[str]
    attrs: dict[str, str]
    extract: tuple[Extract, ...]


@dataclass(frozen=True)
class Patterns:
    prefixes: tuple[Prefix, ...]
    rules: tuple[Rule, ...]


def load_patterns(text: str, where: str = "kmsg_patterns") -> Patterns:
    """Build the table from TOML text (format described at the top of ``kmsg_patterns.toml``).

    Raises ``ConfigError`` naming the entry (``kmsg_patterns.rule[3].kind: ...``): bad kind or regex, unknown key.
    """
    data = tomllib.loads(text)
    defs: dict[str, str] = {}
    for key, value in data.get("defs", {}).items():
        defs[key] = _expand(str(value), defs)

    def entry(path: str, item: Any, allowed: set[str]) -> re.Pattern[str]:
        if unknown := set(item) - allowed - {"regex"}:
            raise ConfigError(f"{where}.{path}: unknown key(s) {sorted(unknown)}, valid: {sorted(allowed)} and regex")
        try:
            return re.compile(_expand(str(item["regex"]), defs))
        except (KeyError, re.error) as exc:
            raise ConfigError(f"{where}.{path}.regex: {'missing' if isinstance(exc, KeyError) else exc}") from None

    prefixes = tuple(
        Prefix(entry(f"prefix[{i}]", p, {"name", "drop"}), bool(p.get("drop", False)))
        for i, p in enumerate(data.get("prefix", []))
    )
    rules = []
    for i, r in enumerate(data.get("rule", [])):
        regex = entry(f"rule[{i}]", r, {"kind", "attrs", "extract"})
        if r.get("kind") not in set(LogKind):
            valid = ", ".join(LogKind)
            raise ConfigError(f"{where}.rule[{i}].kind: must be one of {valid}, got {r.get('kind')!r}")
        extract = tuple(
            Extract(entry(f"rule[{i}].extract[{j}]", e, {"xid"}), tuple(map(int, e["xid"])) if "xid" in e else None)
            for j, e in enumerate(r.get("extract", []))
        )
        attrs = {str(k): str(v) for k, v in r.get("attrs", {}).items()}
        rules.append(Rule(LogKind(r["kind"]), regex, attrs, extract))
    return Patterns(prefixes, tuple(rules))


def _expand(pattern: str, defs: dict[str, str]) -> str:
    for key, value in defs.items():
        pattern = pattern.replace("{{" + key + "}}", value)
    return pattern


@cache
def default_patterns() -> Patterns:
    """The shipped table, read once."""
    text = resources.files("sentinel_collectors").joinpath("kmsg_patterns.toml").read_text(encoding="utf-8")
    return load_patterns(text)


def strip_prefix(line: str, patterns: Patterns | None = None) -> str | None:
    """The kernel message without its log-format prefixes; None when the line is not a kernel message."""
    patterns = patterns or default_patterns()
    message = line.rstrip("\r\n")
    for _ in range(4):  # e.g. syslog header, then dmesg timestamp
        for prefix in patterns.prefixes:
            if match := prefix.regex.match(message):
                if prefix.drop:
                    return None
                message = message[match.end() :]
                break
        else:
            break
    return message.strip()


def parse_line(line: str, node: str, ts: float, patterns: Patterns | None = None) -> LogEvent | None:
    """The event a kernel-log line reports (any known format), or None for a line no rule recognises."""
    patterns = patterns or default_patterns()
    message = strip_prefix(line, patterns)
    if not message:
        return None
    for rule in patterns.rules:
        if (match := rule.regex.search(message)) is None:
            continue
        groups = {k: v for k, v in match.groupdict().items() if v is not None}
        fixed_xid = rule.attrs.get("xid")  # a line that means an Xid without printing its number
        xid = int(groups["xid"]) if "xid" in groups else (int(fixed_xid) if fixed_xid else None)
        if xid is not None and xid > 65535:
            continue  # not a real Xid code; LogEvent would reject it on decode
        attrs = {k: v for k, v in rule.attrs.items() if k != "xid"}
        for extra in rule.extract:
            in_range = extra.xid is None or (xid is not None and extra.xid[0] <= xid <= extra.xid[-1])
            if in_range and (found := extra.regex.search(message)):
                groups.update({k: v for k, v in found.groupdict().items() if v is not None})
        attrs.update({k[:64]: v.strip()[:512] for k, v in groups.items() if k not in _FIELDS})
        return LogEvent(node=node, ts=ts, kind=rule.kind, message=message[:4096], xid=xid,
                        pci_bus_id=groups.get("pci_bus_id"), attrs=attrs)
    return None


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
        now = self.clock.now()
        events = (parse_line(line, self.node, now, self.patterns) for line in lines)
        return [event for event in events if event is not None]

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
