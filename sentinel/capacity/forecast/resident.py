"""The resident demand forecaster: fitted once, kept in the store, reused while fresh.

``sentinel forecast`` used to fit its models on every call (and import scikit-learn to do it): seconds of a
command that should answer at once. Now a fitted forecaster is stored per partition (table
``forecast_models``) by whoever fits it first: the load recorder in ``sentinel controller`` / ``sentinel run``
after it stores new bins, or ``sentinel forecast --save`` on a cold store (without ``--save`` the command writes
nothing). It stays fresh until ``REFIT_BINS`` newer bins
arrived (the forecaster's own ``refit_every``: the online update) and while it covers the horizons asked for;
forecasts always read the newest bins as lags, so a fresh model answers for the newest bin.

The same fit also fits the partition's quantile models (``models.load_quantiles``: p10/p50/p90 at 1 h to 24 h,
the horizons the forecaster covers) and stores them in the same blob, so the quantile table of a warm call comes
from them with numpy only. A blob stored before them has none: ``Resident.quantiles`` is None and the command
falls back to the point forecast's interval.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from sentinel.capacity import bins_store as store
from sentinel.capacity.bins import BIN_S, series
from sentinel.clock import SystemClock
from sentinel_models.forecast import ANCHORS, COARSE, DemandForecaster, LoadSeries
from sentinel_models.forecast_trees import from_bytes, to_bytes
from sentinel_models.load_quantiles import LoadQuantiles

HISTORY_S = 28 * 86_400.0
REFIT_BINS = 6
QUANTILE_REFIT_BINS = 144  # the quantile models are fitted again once a day of newer bins arrived
Q_FITTED = "q_fitted_ts"  # blob key: the newest bin's time when the stored quantile models were fitted
ALL_ANCHORS = ANCHORS + COARSE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resident:
    model: DemandForecaster
    source: str  # stored | fitted | none (too little history to fit)
    fitted_ts: float | None = None
    saved: bool = False
    quantiles: LoadQuantiles | None = None  # None: too little history, or a blob stored before them


def history(engine: Engine, partition: str) -> LoadSeries:
    """The partition's newest 28 days of bins as one evenly spaced series."""
    last = store.latest_bin_ts(engine, partition)
    rows = store.load_bins(engine, partition, None if last is None else last - HISTORY_S)
    cols = series(rows)
    # submissions only when the newest bin knows them (the simulator's scheduler, for one, does not)
    extra = {"submissions": cols["submissions"]} if rows and rows[-1].submissions is not None else {}
    return LoadSeries.build(partition, cols["ts"], capacity=cols["total_gpus"], running_gpus=cols["running_gpus"],
                            pending_gpus=cols["pending_gpus"], **extra)


def stored(engine: Engine, partition: str, s: LoadSeries, anchors: tuple[int, ...]) -> Resident | None:
    """The stored forecaster when it is fresh for ``s`` and covers ``anchors``; else None."""
    return _fresh(store.stored_forecaster(engine, partition), partition, s, anchors)


def _fresh(row: Mapping[str, Any] | None, partition: str, s: LoadSeries, anchors: tuple[int, ...]) -> Resident | None:
    """``stored`` on a row already read (None: nothing stored)."""
    if row is None or not set(anchors) <= set(row["anchors"]) or not len(s):
        return None
    behind = (float(s.ts[-1]) - float(row["fitted_ts"])) / BIN_S
    if not 0 <= behind < REFIT_BINS:
        return None
    try:
        data = from_bytes(bytes(row["blob"]))
        model, quantiles = DemandForecaster.from_arrays(data), LoadQuantiles.from_arrays(data)
    except (ValueError, KeyError) as exc:  # an older or damaged blob: fit again
        log.warning("stored forecaster for %s not readable (%s); fitting a new one", partition, exc)
        return None
    return Resident(model, "stored", float(row["fitted_ts"]), quantiles=quantiles)


def fit(engine: Engine, partition: str, s: LoadSeries, anchors: tuple[int, ...], save: bool = True,
        previous: Mapping[str, Any] | None = None) -> Resident:
    """Fit on ``s`` (when it is long enough) and store the result, the quantile models in the same blob; a
    read-only store only costs the saving. ``previous``: the stored row this fit replaces, whose quantile models
    are reused while they are fresh (``kept_quantiles``) instead of fitted again."""
    model = DemandForecaster(anchors=anchors)
    if len(s) <= model.min_train_rows:
        return Resident(model, "none")
    model.fit([s])
    quantiles, q_fitted = None, float(s.ts[-1])
    if model.trained:
        kept = kept_quantiles(previous, s, max(model.anchors)) if previous is not None else None
        quantiles, q_fitted = kept or (LoadQuantiles.fit(s, max(model.anchors)), q_fitted)
    saved = False
    if save and model.trained:
        try:
            blob = to_bytes({**model.arrays(),
                             **({**quantiles.arrays(), Q_FITTED: np.array([q_fitted])} if quantiles else {})})
            store.save_forecaster(engine, partition, float(s.ts[-1]), len(s), SystemClock().now(), model.anchors,
                                  blob)
            saved = True
        except SQLAlchemyError as exc:
            log.warning("could not store the fitted forecaster for %s: %s", partition, exc)
    return Resident(model, "fitted", float(s.ts[-1]), saved, quantiles)


def kept_quantiles(row: Mapping[str, Any], s: LoadSeries, upto_bins: int) -> tuple[LoadQuantiles, float] | None:
    """The quantile set stored in ``row`` and when it was fitted, if younger than ``QUANTILE_REFIT_BINS`` bins of
    ``s`` and holding every (target, horizon) a fit on ``s`` would make; else None."""
    if not len(s):
        return None
    try:
        data = from_bytes(bytes(row["blob"]))
        quantiles = LoadQuantiles.from_arrays(data)
        fitted = float(data[Q_FITTED][0]) if Q_FITTED in data else None
    except (ValueError, KeyError):
        return None
    if quantiles is None or fitted is None or not 0 <= (float(s.ts[-1]) - fitted) / BIN_S < QUANTILE_REFIT_BINS:
        return None
    return (quantiles, fitted) if set(quantiles.models) == LoadQuantiles.keys_for(s, upto_bins) else None


def resident(engine: Engine, partition: str, s: LoadSeries, anchors: tuple[int, ...],
             refit: bool = False, save: bool = True) -> Resident:
    """The stored forecaster when fresh (unless ``refit``), else a new fit, stored for the next call when
    ``save`` (a read-only ``sentinel forecast`` without ``--save`` writes nothing)."""
    found = None if refit else stored(engine, partition, s, anchors)
    return found if found is not None else fit(engine, partition, s, anchors, save=save)


def refresh(engine: Engine, partitions: list[str] | None = None) -> dict[str, str]:
    """Refit every partition's forecaster (all horizons) that is missing or stale; what happened per partition.
    Called by the load recorder after it stored bins, so the command finds a fresh model."""
    names = partitions if partitions is not None else sorted(store.partitions(engine))
    done = {}
    for name in names:
        s = history(engine, name)
        row = store.stored_forecaster(engine, name)  # read once: checked for freshness, else its quantiles reused
        if _fresh(row, name, s, ALL_ANCHORS) is not None:
            done[name] = "fresh"
            continue
        done[name] = fit(engine, name, s, ALL_ANCHORS, previous=row).source
    return done


def describe(r: Resident) -> dict[str, Any]:
    return {"source": r.source, "fitted_ts": r.fitted_ts, "anchors_bins": list(r.model.anchors), "saved": r.saved,
            "quantile_models": r.quantiles is not None}
