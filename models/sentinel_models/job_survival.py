"""Kaplan-Meier survival of durations with right censoring, for job run times and queue waits.

``Survival.fit(durations, ended)`` takes every job's observed duration and whether it ended (False: still
running or waiting when the record stops, so it lasted at least that long). ``p_more(age, extra)`` is the
probability that a job already ``age`` seconds in lasts ``extra`` more: ``S(age + extra) / S(age)``. Beyond the
longest duration seen the curve is flat at its last value, and a job older than every one that ended is taken to
go on (probability 1): nothing seen says when it stops. Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Survival:
    times: np.ndarray  # sorted distinct durations at which something ended (seconds)
    surv: np.ndarray  # S(t) just after each of ``times``

    @classmethod
    def fit(cls, durations: np.ndarray, ended: np.ndarray) -> Survival:
        d = np.maximum(np.asarray(durations, dtype=float), 0.0)
        e = np.asarray(ended, dtype=bool)
        keep = np.isfinite(d)
        d, e = d[keep], e[keep]
        if not e.any():
            return cls(np.zeros(0), np.zeros(0))
        times, deaths = np.unique(d[e], return_counts=True)
        order = np.sort(d)
        at_risk = len(order) - np.searchsorted(order, times, side="left")  # durations >= t
        surv = np.cumprod(1.0 - deaths / np.maximum(at_risk, 1))
        return cls(times, surv)

    def __call__(self, t: np.ndarray) -> np.ndarray:
        """S(t): the share of durations longer than ``t``."""
        t = np.asarray(t, dtype=float)
        if not len(self.times):
            return np.ones_like(t)
        i = np.searchsorted(self.times, t, side="right")
        return np.where(i == 0, 1.0, self.surv[np.maximum(i - 1, 0)])

    def p_more(self, age: np.ndarray, extra: float) -> np.ndarray:
        now = self(age)
        later = self(np.asarray(age, dtype=float) + extra)
        return np.where(now > 0, later / np.where(now > 0, now, 1.0), 1.0)
