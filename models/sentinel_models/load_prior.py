"""The baseline the aggregate-bin quantile models start from: persistence with the series' own empirical change
over the horizon, mixed with the series' own empirical level distribution (its "climate").

The load of a partition sometimes jumps back toward the levels it usually runs at, which persistence with the
changes seen over the horizon under-weights. ``LoadPrior`` is the mixture of two empirical distributions, both from
one series' bins before an end: ``weight`` of "value now + a change seen over ``h`` bins" and ``1 - weight`` of "a
level seen"; its quantiles are those of the mixture, not averages of quantiles (a mixture keeps both modes).
``weight`` 1 is the ``last`` baseline of the benchmarks; 0.9 (the only other weight, ``WEIGHTS``) gives the levels
seen a tenth of the mass, which fattens the tails where persistence is too sure.

``choose_weight`` picks the weight per target and horizon out of sample in time: each series' training bins are
cut at ``SPLIT`` of their length, the prior is built from the older part and scored (pinball loss) on the origins
of the newer part, pooled over the series; ties go to the higher weight (persistence). Chosen on the bins the
model fits on, never on the bins it is scored on. Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sentinel_models.quantile_scores import QUANTILES, pinball, shifted

# Persistence's share, 1.0 first (ties keep it). Only 0.9 besides: on a split inside the Helios training weeks
# (prior from days 1-14, judged on 15-21) the lower weights that the older bins preferred were far worse on the
# newer ones for running GPUs (a level distribution goes stale when a partition changes regime: -36 % at 24 h),
# while 1 or 0.9 never lost more than 0.3 % there and 1.2 % on the later weeks (docs/benchmarks.md).
WEIGHTS = (1.0, 0.9)
SPLIT = 2 / 3  # the prior of the older two thirds of the training bins is judged on the newest third
_STEPS = 40  # bisection steps for a quantile of the mixture (the span halves each step)


@dataclass(frozen=True)
class LoadPrior:
    changes: np.ndarray  # sorted changes over h bins seen in the series
    levels: np.ndarray  # sorted levels seen in the series
    weight: float = 1.0  # share of persistence + change in the mixture

    @classmethod
    def of(cls, y: np.ndarray, h: int, end: int | None = None, weight: float = 1.0) -> LoadPrior:
        """The prior of series ``y`` at ``h`` bins ahead from its bins before ``end`` (all of them by default)."""
        return cls._of([np.asarray(y, dtype=float)[:end]], h, weight)

    @classmethod
    def outside(cls, y: np.ndarray, h: int, lo: int, hi: int, weight: float) -> LoadPrior:
        """The prior of ``y`` from every bin except ``lo..hi - 1`` (changes taken within each side, never across
        the gap): the baseline of training origins whose truths lie in that span, so it never holds them."""
        y = np.asarray(y, dtype=float)
        return cls._of([y[:lo], y[hi:]], h, weight)

    @classmethod
    def _of(cls, runs: Sequence[np.ndarray], h: int, weight: float) -> LoadPrior:
        changes = np.concatenate([r[h:] - r[:-h] for r in runs if len(r) > h] or [np.zeros(0)])
        levels = np.concatenate(list(runs))
        changes, levels = changes[np.isfinite(changes)], levels[np.isfinite(levels)]
        return cls(np.sort(changes) if len(changes) else np.zeros(1),
                   np.sort(levels) if len(levels) else np.zeros(1), float(weight))

    @staticmethod
    def blocks(origins: np.ndarray, h: int, count: int = 3) -> list[tuple[np.ndarray, int, int]]:
        """``origins`` cut into ``count`` runs, each with the span of bins ``(lo, hi)`` its rows read (origins
        and truths): a training row's prior comes from outside its run (``outside``)."""
        return [(k, int(k[0]), int(k[-1]) + h + 1) for k in np.array_split(np.asarray(origins, int), count) if len(k)]

    def quantiles(self, level: np.ndarray) -> np.ndarray:
        """``(n, 3)`` quantiles p10, p50, p90 of the mixture at each value now in ``level``, floored at 0."""
        level = np.asarray(level, dtype=float)
        if self.weight >= 1.0:  # persistence alone: the change quantiles shifted, no search needed
            return shifted(level, np.quantile(self.changes, QUANTILES))
        lo = np.minimum(level + self.changes[0], self.levels[0]) - 1.0
        hi = np.maximum(level + self.changes[-1], self.levels[-1])
        out = []
        for q in QUANTILES:  # the smallest x with F(x) >= q, F the mixture's distribution function
            a, b = lo.copy(), hi.copy()
            for _ in range(_STEPS):
                mid = 0.5 * (a + b)
                ok = self._cdf(level, mid) >= q - 1e-9  # a mixture weight like 0.1 is not exact in binary
                b, a = np.where(ok, mid, b), np.where(ok, a, mid)
            out.append(b)
        return np.maximum(np.column_stack(out), 0.0)

    def _cdf(self, level: np.ndarray, x: np.ndarray) -> np.ndarray:
        moved = np.searchsorted(self.changes, x - level, side="right") / len(self.changes)
        seen = np.searchsorted(self.levels, x, side="right") / len(self.levels)
        return self.weight * moved + (1.0 - self.weight) * seen


def choose_weight(series: Sequence[np.ndarray], h: int, first: int = 0) -> float:
    """The ``WEIGHTS`` entry with the lowest pooled pinball loss when each series' prior, built from its older
    ``SPLIT`` of bins, forecasts ``h`` bins ahead from every origin (at or after ``first``) of its newer bins;
    1.0 (persistence) when no series has enough bins to judge."""
    judged = []
    for y in series:
        y = np.asarray(y, dtype=float)
        cut = max(int(len(y) * SPLIT), first, h + 1)
        k = np.arange(cut, len(y) - h)
        if len(k):
            judged.append((y, cut, k))
    if not judged:
        return 1.0
    truth = np.concatenate([y[k + h] for y, _, k in judged])

    def loss(w: float) -> float:
        return pinball(truth, np.vstack([LoadPrior.of(y, h, cut, w).quantiles(y[k]) for y, cut, k in judged]))

    scores = {w: loss(w) for w in WEIGHTS}
    return min(WEIGHTS, key=scores.__getitem__)  # min keeps the first of equals: the higher weight
