"""Kernel-log collector: recognise Xid, GSP, PCIe AER, NIC (mlx5/InfiniBand) and machine-check lines.

Reads only: a line becomes a ``LogEvent`` or nothing; judging it is the detector's job. Log formats and
classification rules are data (``kmsg_patterns.toml``, loaded once): a new format or message is a table edit, and
the Xid code is read from the line, so an Xid number no table lists still parses.

``sentinel_collectors.kmsg_source.KmsgSource`` reads ``/dev/kmsg`` (or tails a file) and hands its lines to
``join_lines``.

A driver report of several lines (a PCIe AER report, an Xid 13 exception with its ESR line, an NVSwitch SXid with
its engine and data lines, an mlx5 health dump) becomes one event: ``join_lines`` applies the bounded joining rule
of the table's ``[join]`` section (docs/agent.md, "Kernel log formats"), within one ``read()``.
"""

from __future__ import annotations

import re
import tomllib
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from sentinel.clock import SystemClock
from sentinel.errors import ConfigError
from sentinel.events import LogEvent, LogKind

_FIELDS = ("xid", "pci_bus_id")  # named groups that fill LogEvent fields; every other group becomes an attr
_CLOCKS = ("time", "uptime", "uptime_us")  # prefix groups: the wall-clock time, the seconds since boot a line carries
FUTURE_S = 300.0  # a line's wall-clock time this far past the reader's clock is a misread year or zone: not used
JOIN_SEPARATOR = " | "  # between the lines of one joined report (one line in tables and alerts)


@dataclass(frozen=True)
class Prefix:
    regex: re.Pattern[str]
    drop: bool  # a line of this shape is not a kernel message
    time: str | None = None  # how to read the (?P<time>...) group: "iso" or a strptime format


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
    pci: str = "pci_bus_id"  # the group that fills LogEvent.pci_bus_id
    continues: re.Pattern[str] | None = None  # the lines of this rule that continue an open report
    keys: tuple[str, ...] = ()  # groups whose values are join keys of the report this rule opens


@dataclass(frozen=True)
class Join:
    """The joining rule (``[join]`` in the table): which lines continue a report, and its bounds."""

    keys: tuple[re.Pattern[str], ...] = ()
    max_lines: int = 32  # continuation lines per report, after its first line
    max_bytes: int = 4096  # of the joined message: the wire's cap on LogEvent.message
    gap_s: float = 1.0  # a continuation line is at most this long after the report's first line
    max_open: int = 16  # reports open (or waiting for an older one to close) at once; the oldest closes first


@dataclass(frozen=True)
class Patterns:
    prefixes: tuple[Prefix, ...]
    rules: tuple[Rule, ...]
    join: Join = Join()


@dataclass(frozen=True)
class Line:
    """A kernel-log line without its format prefixes, and what the prefixes said."""

    message: str
    indented: bool  # white space right after the prefixes: a continuation line
    uptime: float | None = None  # seconds since boot (dmesg, /dev/kmsg)
    wall: float | None = None  # wall-clock time (dmesg -T, journal, syslog), epoch seconds


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

    prefixes = []
    for i, p in enumerate(data.get("prefix", [])):
        regex = entry(f"prefix[{i}]", p, {"name", "drop", "time"})
        if ("time" in regex.groupindex) != ("time" in p):
            raise ConfigError(f"{where}.prefix[{i}]: a (?P<time>...) group and a time key go together")
        prefixes.append(Prefix(regex, bool(p.get("drop", False)), str(p["time"]) if "time" in p else None))
    rules = []
    for i, r in enumerate(data.get("rule", [])):
        regex = entry(f"rule[{i}]", r, {"kind", "attrs", "extract", "pci", "continues", "keys"})
        if r.get("kind") not in set(LogKind):
            valid = ", ".join(LogKind)
            raise ConfigError(f"{where}.rule[{i}].kind: must be one of {valid}, got {r.get('kind')!r}")
        extract = tuple(
            Extract(entry(f"rule[{i}].extract[{j}]", e, {"xid"}), tuple(map(int, e["xid"])) if "xid" in e else None)
            for j, e in enumerate(r.get("extract", []))
        )
        attrs = {str(k): str(v) for k, v in r.get("attrs", {}).items()}
        cont = r.get("continues", False)
        continues = entry(f"rule[{i}].continues", {"regex": "" if cont is True else cont}, set()) if cont else None
        pci, keys = str(r.get("pci", "pci_bus_id")), tuple(map(str, r.get("keys", [])))
        if unknown := {pci, *keys} - set(regex.groupindex) - {"pci_bus_id"}:
            raise ConfigError(f"{where}.rule[{i}]: pci/keys name group(s) {sorted(unknown)} the regex lacks")
        rules.append(Rule(LogKind(r["kind"]), regex, attrs, extract, pci, continues, keys))
    table = data.get("join", {})
    if unknown := set(table) - {"key", "max_lines", "max_bytes", "gap_s", "max_open"}:
        raise ConfigError(f"{where}.join: unknown key(s) {sorted(unknown)}")
    join = Join(tuple(entry(f"join.key[{i}]", {"regex": k}, set()) for i, k in enumerate(table.get("key", []))),
                int(table.get("max_lines", Join.max_lines)), int(table.get("max_bytes", Join.max_bytes)),
                float(table.get("gap_s", Join.gap_s)), max(1, int(table.get("max_open", Join.max_open))))
    return Patterns(tuple(prefixes), tuple(rules), join)


def _expand(pattern: str, defs: dict[str, str]) -> str:
    for key, value in defs.items():
        pattern = pattern.replace("{{" + key + "}}", value)
    return pattern


@cache
def default_patterns() -> Patterns:
    """The shipped table, read once."""
    text = resources.files("sentinel_collectors").joinpath("kmsg_patterns.toml").read_text(encoding="utf-8")
    return load_patterns(text)


def split_line(line: str, patterns: Patterns | None = None, ref: float | None = None) -> Line | None:
    """The kernel message without its log-format prefixes, with the times they carried; None when the line is
    not a kernel message. ``ref`` (the reader's clock) gives the year to a time printed without one."""
    patterns = patterns or default_patterns()
    message = line.rstrip("\r\n")
    uptime = wall = None
    for _ in range(4):  # e.g. syslog header, then dmesg timestamp
        for prefix in patterns.prefixes:
            if match := prefix.regex.match(message):
                if prefix.drop:
                    return None
                clocks = {k: v for k, v in match.groupdict().items() if k in _CLOCKS and v}
                if "uptime" in clocks and uptime is None:
                    uptime = float(clocks["uptime"])
                elif "uptime_us" in clocks and uptime is None:
                    uptime = int(clocks["uptime_us"]) / 1e6
                if "time" in clocks and prefix.time and wall is None:
                    wall = _wall_time(clocks["time"], prefix.time, SystemClock().now() if ref is None else ref)
                message = message[match.end() :]
                break
        else:
            break
    return Line(message.strip(), message[:1].isspace(), uptime, wall)


@lru_cache(maxsize=1024)  # the lines of a burst print the same second: strptime is most of a line's cost
def _wall_time(text: str, spec: str, ref: float) -> float | None:
    """Epoch seconds of a printed time: ``spec`` "iso" or a strptime format. Without a zone it is the reader's
    local time; without a year, the latest year that does not put it more than a day after ``ref``."""
    try:
        if spec == "iso":
            return datetime.fromisoformat(text).timestamp()
        if "%Y" in spec:
            return datetime.strptime(text, spec).timestamp()
        year = datetime.fromtimestamp(ref).year
        for candidate in range(year + 1, year - 8, -1):  # back to a leap year for "Feb 29"
            try:
                when = datetime.strptime(f"{candidate} {text}", f"%Y {spec}").timestamp()
            except ValueError:
                continue
            if when <= ref + 86_400:
                return when
    except (ValueError, OverflowError, OSError):
        pass
    return None


def strip_prefix(line: str, patterns: Patterns | None = None) -> str | None:
    """The kernel message without its log-format prefixes; None when the line is not a kernel message."""
    split = split_line(line, patterns)
    return None if split is None else split.message


@dataclass
class _Found:
    rule: Rule
    xid: int | None
    pci: str | None
    attrs: dict[str, str]
    groups: dict[str, str]


def _classify(message: str, patterns: Patterns) -> _Found | None:
    for rule in patterns.rules:
        if (match := rule.regex.search(message)) is None:
            continue
        groups = {k: v for k, v in match.groupdict().items() if v is not None}
        fixed_xid = rule.attrs.get("xid")  # a line that means an Xid without printing its number
        xid = int(groups["xid"]) if "xid" in groups else (int(fixed_xid) if fixed_xid else None)
        if xid is not None and xid > 65535:
            continue  # not a real Xid code; LogEvent would reject it on decode
        attrs = {k: v for k, v in rule.attrs.items() if k != "xid"}
        _extract(rule, xid, message, groups)
        attrs.update({k[:64]: v.strip()[:512] for k, v in groups.items() if k not in _FIELDS})
        pci = groups.get(rule.pci)
        return _Found(rule, xid, pci[:64] if pci else None, attrs, groups)
    return None


def _extract(rule: Rule, xid: int | None, message: str, into: dict[str, str]) -> None:
    for extra in rule.extract:
        in_range = extra.xid is None or (xid is not None and extra.xid[0] <= xid <= extra.xid[-1])
        if in_range and (found := extra.regex.search(message)):
            for k, v in found.groupdict().items():
                if v is not None:
                    into.setdefault(k, v)


def event_ts(line: Line, ts: float) -> float:
    """The line's own wall-clock time when it has one that is not after ``ts`` (the reader's clock, plus
    FUTURE_S for clock skew); otherwise ``ts``. Seconds since boot never become the event's time."""
    if line.wall is not None and 0.0 <= line.wall <= ts + FUTURE_S:
        return line.wall
    return ts


def parse_line(line: str, node: str, ts: float, patterns: Patterns | None = None) -> LogEvent | None:
    """The event a kernel-log line reports (any known format), or None for a line no rule recognises.

    ``ts`` is the reader's clock: the event's time unless the line carries a wall-clock time (``event_ts``)."""
    patterns = patterns or default_patterns()
    split = split_line(line, patterns, ts)
    if split is None or not split.message or (found := _classify(split.message, patterns)) is None:
        return None
    return LogEvent(node=node, ts=event_ts(split, ts), kind=found.rule.kind, message=split.message[:4096],
                    xid=found.xid, pci_bus_id=found.pci, attrs=found.attrs)


def join_lines(lines: Iterable[str], node: str, ts: float,
               patterns: Patterns | None = None) -> Iterator[tuple[int, LogEvent]]:
    """(number of its first line, from 1; event) for every report in ``lines``, in the order the reports began.

    A report is a recognised line and its continuation lines (the ``[join]`` rule): lines that start with one of
    the report's join keys (``[join] key``: the driver and device, the GPU and Xid code, the switch and SXid code),
    or are indented right after the report's previous line; a recognised line opens a report of its own unless
    its rule says it ``continues`` one (an AER detail line, an Xid 13 ESR line) and a report of the same kind and
    key is open that a non-continuation line began. A report takes at most ``max_lines`` continuation lines and
    ``max_bytes`` of message, each at most ``gap_s`` after its first line (by the lines' own clocks, when both
    carry the same kind), and at most ``max_open`` reports wait at once: memory and delay stay bounded whatever
    the input. Its event is its first line's (kind, code, PCI address, time), with the message of all its lines
    and the attrs its continuation lines add (the first line's win)."""
    joiner = _Joiner(node, ts, patterns or default_patterns())
    for number, line in enumerate(lines, 1):
        yield from joiner.feed(number, line)
    yield from joiner.flush()


@dataclass(eq=False)
class _Report:
    number: int
    head: Line
    found: _Found
    keys: set[str]
    begun_by_continuation: bool
    messages: list[str] = field(default_factory=list)
    size: int = 0
    closed: bool = False


class _Joiner:
    def __init__(self, node: str, ts: float, patterns: Patterns) -> None:
        self.node, self.ts, self.patterns, self.join = node, ts, patterns, patterns.join
        self.pending: deque[_Report] = deque()  # in the order they began; closed ones leave from the front
        self.by_key: dict[str, _Report] = {}  # open reports by join key
        self.last: _Report | None = None  # the report the previous line went to: an indented line continues it

    def feed(self, number: int, raw: str) -> list[tuple[int, LogEvent]]:
        line = split_line(raw, self.patterns, self.ts)
        if line is None or not line.message:
            self.last = None
            return self._ready()
        self._expire(line)
        key = next((m.group("key") if "key" in p.groupindex else m.group(0)
                    for p in self.join.keys if (m := p.match(line.message))), None)
        report = self.by_key.get(key) if key else None
        found = _classify(line.message, self.patterns)
        if found is not None:
            continuation = found.rule.continues is not None and bool(found.rule.continues.search(line.message))
            if (continuation and report is not None and report.found.rule.kind is found.rule.kind
                    and not report.begun_by_continuation and self._fits(report, line)):
                self._add(report, line, found.attrs)
            else:
                self._open(number, line, found, key, continuation)
            return self._ready()
        target = report if report is not None else (self.last if line.indented else None)
        if target is not None and self._fits(target, line):
            self._add(target, line, {})
        else:
            if target is not None:
                self._close(target)  # it cannot take its next line: complete
            self.last = None
        return self._ready()

    def flush(self) -> list[tuple[int, LogEvent]]:
        for report in self.pending:
            self._close(report)
        return self._ready()

    def _open(self, number: int, line: Line, found: _Found, key: str | None, continuation: bool) -> None:
        keys = {k for k in (key, *(found.groups.get(g) for g in found.rule.keys)) if k}
        for k in keys:
            if (old := self.by_key.get(k)) is not None:
                self._close(old)  # a new report from the same source: the old one is complete
        report = _Report(number, line, found, keys, continuation, [line.message], len(line.message))
        self.by_key.update(dict.fromkeys(keys, report))
        self.pending.append(report)
        self.last = report
        if len(self.pending) > self.join.max_open:
            self._close(self.pending[0])

    def _fits(self, report: _Report, line: Line) -> bool:
        if report.closed or len(report.messages) > self.join.max_lines:
            return False
        if report.size + len(JOIN_SEPARATOR) + len(line.message) > self.join.max_bytes:
            return False
        gap = _gap(report.head, line)
        return gap is None or 0.0 <= gap <= self.join.gap_s

    def _add(self, report: _Report, line: Line, attrs: dict[str, str]) -> None:
        report.messages.append(line.message)
        report.size += len(JOIN_SEPARATOR) + len(line.message)
        extra: dict[str, str] = {}
        _extract(report.found.rule, report.found.xid, line.message, extra)  # e.g. an SXid's engine and data
        for k, v in [*attrs.items(), *extra.items()]:
            if k not in _FIELDS:
                report.found.attrs.setdefault(k[:64], v.strip()[:512])
        self.last = report

    def _expire(self, line: Line) -> None:
        for report in self.pending:
            gap = _gap(report.head, line)
            if not report.closed and gap is not None and not 0.0 <= gap <= self.join.gap_s:
                self._close(report)

    def _close(self, report: _Report) -> None:
        report.closed = True
        for k in report.keys:
            if self.by_key.get(k) is report:
                del self.by_key[k]
        if self.last is report:
            self.last = None

    def _ready(self) -> list[tuple[int, LogEvent]]:
        out = []
        while self.pending and self.pending[0].closed:
            report = self.pending.popleft()
            found = report.found
            message = JOIN_SEPARATOR.join(report.messages)[:4096]
            out.append((report.number, LogEvent(node=self.node, ts=event_ts(report.head, self.ts),
                                                kind=found.rule.kind, message=message, xid=found.xid,
                                                pci_bus_id=found.pci, attrs=found.attrs)))
        return out


def _gap(head: Line, line: Line) -> float | None:
    """Seconds from ``head`` to ``line`` by the first clock both carry (since boot, else wall); None: no clock."""
    if head.uptime is not None and line.uptime is not None:
        return line.uptime - head.uptime
    if head.wall is not None and line.wall is not None:
        return line.wall - head.wall
    return None
