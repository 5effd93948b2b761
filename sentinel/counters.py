"""Counter arithmetic, in one place: scalar deltas (collectors, on the wire) and windowed rates over arrays
(the detector's rules and the models' features).

Device and kernel counters are monotonic until they reset (reboot, driver reload, ``perfquery -r``) or wrap.
After a reset we cannot know how much happened in between, so the delta is unknown rather than guessed, and
a negative or huge delta never reaches a rule.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


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


def counter_increase(values: np.ndarray) -> np.ndarray:
    """Per-step increases of counters along axis 0; a reset (a step backwards) or a NaN counts as 0."""
    diff = np.diff(values, axis=0)
    with np.errstate(invalid="ignore"):
        diff = np.where(diff < 0, 0.0, diff)
    return np.nan_to_num(diff, nan=0.0)


def rate_per_h(values: np.ndarray, ts: np.ndarray, last: int | None = None) -> np.ndarray:
    """Counter increase per hour over the window, or over its last ``last`` steps. ``ts`` is (T,), or (T, N) for
    N windows of their own times stacked on axis 1."""
    inc = counter_increase(values)
    steps = inc.shape[0] if last is None else min(last, inc.shape[0])
    if steps == 0:
        return np.zeros(values.shape[1:])
    total = inc[-steps:].sum(axis=0)
    span = np.maximum(np.asarray(ts[-1] - ts[-1 - steps], dtype=np.float64), 1e-9)  # one per node if ts is (T, N)
    return total * 3600.0 / span.reshape(span.shape + (1,) * (total.ndim - span.ndim))
