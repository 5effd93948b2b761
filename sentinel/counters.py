"""Counter arithmetic shared by collectors (deltas on the wire) and the detector.

Device and kernel counters are monotonic until they reset (reboot, driver reload, ``perfquery -r``) or wrap.
After a reset we cannot know how much happened in between, so the delta is unknown rather than guessed, and
a negative or huge delta never reaches a rule.
"""

from __future__ import annotations

from collections.abc import Mapping


def counter_delta(previous: int | None, current: int | None) -> int | None:
    """Increase of a monotonic counter between two reads; None if either is missing or it went backwards."""
    if previous is None or current is None or current < previous:
        return None
    return current - previous


def counter_deltas(previous: Mapping[str, int | None] | None, current: Mapping[str, int | None]) -> dict[str, int]:
    """Deltas for every counter present in both reads and not reset in between."""
    if not previous:
        return {}
    out: dict[str, int] = {}
    for name, value in current.items():
        delta = counter_delta(previous.get(name), value)
        if delta is not None:
            out[name] = delta
    return out
