"""Building blocks of the typed configuration: the section base class and the validators every section uses.

Kept apart from ``sentinel.config`` so the sections of one area can live in their own module.
"""

from __future__ import annotations

import math

import msgspec


def require(ok: bool, field: str, message: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{field}: {message}, got {value!r}")


def positive(field: str, value: float) -> None:
    require(math.isfinite(value) and value > 0, field, "must be a finite number > 0", value)


def listen(field: str, value: str) -> None:
    if value:
        host, _, port = value.rpartition(":")
        require(bool(host) and port.isdigit() and 0 < int(port) < 65536, field, "must be HOST:PORT", value)


class Section(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


def non_negative(field: str, value: float) -> None:
    require(math.isfinite(value) and value >= 0, field, "must be a finite number >= 0", value)
