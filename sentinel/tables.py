"""Plain-text tables and time formatting for the CLI (no dependency, readable in any terminal or log)."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from sentinel.errors import ValidationError


def fmt_ts(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def fmt_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def render(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], max_width: int = 80) -> str:
    """Render ``rows`` as an aligned table; ``columns`` are (key, header) pairs. Long cells are cut with '~'."""
    cells = [[fmt_value(row.get(key)) for key, _ in columns] for row in rows]
    cells = [[c if len(c) <= max_width else c[: max_width - 1] + "~" for c in line] for line in cells]
    headers = [h for _, h in columns]
    widths = [max([len(h)] + [len(line[i]) for line in cells]) for i, h in enumerate(headers)]
    out = ["  ".join(_header(h).ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells]
    return "\n".join(out)


def _header(text: str) -> str:
    """Headers in capitals, but units as written: ``speed Mb/s`` -> ``SPEED Mb/s``, not ``MB/S``."""
    return " ".join(w.upper() if w.isalpha() and w.islower() else w for w in text.split(" "))


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_duration(text: str) -> float:
    """'90s', '30m', '1h', '2d', '1w' (or bare seconds) to seconds."""
    match = _DURATION.match(text)
    if not match:
        raise ValidationError(f"not a duration: {text!r} (use e.g. 90s, 30m, 1h, 2d)")
    return float(match.group(1)) * _UNITS[match.group(2)]
