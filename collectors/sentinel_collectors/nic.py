"""NIC collector: Ethernet interfaces and InfiniBand/RoCE ports, read from sysfs.

Reads only; judging (is ``symbol_error`` rising too fast?) belongs to the detector. The sysfs root is injectable
so tests read recorded trees, and the live ``/sys`` in the veth integration test.

Contract of :meth:`NicCollector.read`:

- Ethernet: one reading per directory in ``<root>/class/net/`` (plain files there, e.g. ``bonding_masters``,
  are not interfaces). ``type`` gives the link layer (ARPHRD: 1 ethernet, 32 infiniband, 772 loopback).
  ``carrier`` and ``speed`` fail with EINVAL while an interface is down; that, an empty file, a directory or
  any other unreadable value gives None, as does an unknown ``speed`` (-1, 65535, 2**32-1). Counters:
  ``carrier_changes``, ``carrier_up_count``, ``carrier_down_count`` and every file in ``statistics/``, keyed
  by file name.
- InfiniBand/RoCE: one reading per ``<root>/class/infiniband/<dev>/ports/<port>/``, named ``<dev>/<port>``
  (``mlx5_0/1``; never clashes with an interface name, which cannot hold ``/``). ``state`` is kept verbatim
  (``4: ACTIVE``); carrier is ``phys_state`` == 5 (LinkUp); ``rate`` (``400 Gb/sec (4X NDR)``) gives the speed.
  Counters: every file in ``counters/`` and ``hw_counters/`` by file name. The two sets do not overlap on
  mlx5, so hw names stay as the driver writes them (rules can use the documented names); should a driver ever
  repeat a name, the hw_counters one is stored as ``hw_<name>`` rather than overwrite the IBTA counter.
- ``include`` (glob patterns) keeps only matching names, ``exclude`` drops matching ones; an IB port matches
  by ``<dev>/<port>`` or by ``<dev>``.
- A counter file that is unreadable, not a decimal integer, negative or >= 2**63 (outside the wire's int64)
  is left out of ``counters`` and added to ``self.skipped`` (a running total since construction, for a
  ``_total`` metric); it never fails the read. Saturated 32-bit counters stay as read.
- ``deltas`` are ``counter_deltas(previous read, this read)`` per NIC: none on the first read, none for a
  counter that went backwards (reset), never negative. A NIC that vanishes loses its history.
- No ``class/net`` and no ``class/infiniband`` → ``[]`` (a container, a host without IB); no sysfs root at
  all, or a class directory that cannot be listed → ``CollectorError``.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec

from sentinel.counters import counter_deltas
from sentinel.errors import CollectorError
from sentinel.events import NicReading

INT64_LIMIT = 2**63
ARPHRD_LINK_LAYER = {1: "ethernet", 32: "infiniband", 772: "loopback", 65534: "none"}
ETHERNET_COUNTERS = ("carrier_changes", "carrier_up_count", "carrier_down_count")
# Not counters: mlx5's hw_counters/lifespan is the statistics refresh period in ms, a writable knob.
NOT_COUNTERS = frozenset({"lifespan"})
# -1 is SPEED_UNKNOWN; older drivers print it as an unsigned 16- or 32-bit value, and no link runs at those.
SPEED_UNKNOWN = frozenset({0xFFFF, 0xFFFF_FFFF})
_INT = re.compile(r"-?[0-9]+")  # stricter than int(): no "+", "_" or non-ASCII digits
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([GMT])b/sec")
_RATE_UNIT_MBPS = {"M": 1, "G": 1000, "T": 1_000_000}


class NicCollector:
    name = "nic"

    def __init__(
        self,
        sysfs_root: str | Path = "/sys",
        include: Sequence[str] | None = None,
        exclude: Sequence[str] = ("lo",),
    ) -> None:
        self.root = Path(sysfs_root)
        self.include = list(include) if include is not None else None
        self.exclude = list(exclude)
        self.skipped = 0
        self._previous: dict[str, dict[str, int]] = {}

    def read(self) -> list[NicReading]:
        if not self.root.is_dir():
            raise CollectorError(f"sysfs root {self.root} does not exist")
        readings = [
            msgspec.structs.replace(r, deltas=counter_deltas(self._previous.get(r.name), r.counters))
            for r in [*self._ethernet(), *self._infiniband()]
        ]
        self._previous = {r.name: dict(r.counters) for r in readings}
        return readings

    def _wanted(self, *names: str) -> bool:
        if any(fnmatch.fnmatchcase(n, p) for n in names for p in self.exclude):
            return False
        return self.include is None or any(fnmatch.fnmatchcase(n, p) for n in names for p in self.include)

    def _ethernet(self) -> Iterator[NicReading]:
        for name, path in _subdirs(self.root / "class" / "net"):
            if not self._wanted(name):
                continue
            kind = _int(path / "type")
            carrier = _int(path / "carrier")
            speed = _int(path / "speed")
            counters = self._counters(path, ETHERNET_COUNTERS)
            counters.update(self._counters(path / "statistics"))
            yield NicReading(
                name=name[:64],
                link_layer="unknown" if kind is None else ARPHRD_LINK_LAYER.get(kind, f"arphrd_{kind}"),
                state=(_text(path / "operstate") or "")[:32],
                carrier=None if carrier is None else carrier != 0,
                speed_mbps=None if speed is None or speed < 0 or speed in SPEED_UNKNOWN else speed,
                mtu=non_negative(_int(path / "mtu")),
                counters=counters,
            )

    def _infiniband(self) -> Iterator[NicReading]:
        for dev, dev_path in _subdirs(self.root / "class" / "infiniband"):
            for port, path in _subdirs(dev_path / "ports"):
                name = f"{dev}/{port}"
                if not self._wanted(name, dev):
                    continue
                phys_state = _text(path / "phys_state")
                counters = self._counters(path / "counters")
                for key, value in self._counters(path / "hw_counters").items():
                    counters[f"hw_{key}" if key in counters else key] = value
                yield NicReading(
                    name=name[:64],
                    link_layer=(_text(path / "link_layer") or "infiniband").lower()[:32],
                    state=(_text(path / "state") or "")[:32],
                    carrier=None if phys_state is None else phys_state.startswith("5"),
                    speed_mbps=_rate_mbps(_text(path / "rate")),
                    counters=counters,
                )

    def _counters(self, directory: Path, names: Sequence[str] | None = None) -> dict[str, int]:
        """Counter files in ``directory`` (all of them, or only ``names`` where present); bad ones skipped."""
        if names is None:
            try:
                names = sorted(n for n in os.listdir(directory) if n not in NOT_COUNTERS)
            except OSError:  # no statistics/ or hw_counters/ on this device: nothing to read, nothing skipped
                return {}
        out: dict[str, int] = {}
        base = os.fspath(directory)
        for name in names:
            raw = _read(f"{base}/{name}")
            if raw is _MISSING:
                continue  # an optional counter this kernel does not have
            text = raw.decode("ascii", errors="replace").strip() if raw else ""
            value = int(text) if _INT.fullmatch(text) else None
            if value is None or not 0 <= value < INT64_LIMIT:
                self.skipped += 1
                continue
            out[name] = value
        return out


def _subdirs(directory: Path) -> list[tuple[str, Path]]:
    """Sorted (name, path) of the directories (or links to them) in ``directory``; [] if it does not exist."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CollectorError(f"cannot list {directory}: {exc}") from exc
    return [(n, directory / n) for n in names if (directory / n).is_dir()]


_MISSING = b"\0missing"


def _read(path: str) -> bytes | None:
    """Raw bytes of a sysfs file with plain syscalls (much cheaper than pathlib's buffered I/O, and sysfs
    values are tiny); ``_MISSING`` if it does not exist, None if it exists but cannot be read (EINVAL, EISDIR)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return _MISSING
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def _text(path: Path) -> str | None:
    """The stripped content of a sysfs file; None if it cannot be read (EINVAL, missing, a directory) or is empty."""
    raw = _read(os.fspath(path))
    if raw is None or raw is _MISSING:
        return None
    return raw.decode("ascii", errors="replace").strip() or None


def _int(path: Path) -> int | None:
    text = _text(path)
    return int(text) if text is not None and _INT.fullmatch(text) else None


def non_negative(value: int | None) -> int | None:
    return value if value is not None and value >= 0 else None


def _rate_mbps(rate: str | None) -> int | None:
    """``400 Gb/sec (4X NDR)`` → 400000; ``2.5 Gb/sec (1X SDR)`` → 2500; anything else → None."""
    match = _RATE.match(rate or "")
    if match is None:
        return None
    return round(float(match.group(1)) * _RATE_UNIT_MBPS[match.group(2)])
