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
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from sentinel.clock import SystemClock
from sentinel.load_bins import BIN_S, series
from sentinel.models.forecast import ANCHORS, COARSE, DemandForecaster, LoadSeries
from sentinel.models.forecast_trees import from_bytes, to_bytes
from sentinel.models.load_quantiles import LoadQuantiles
from sentinel.store import load as store

HISTORY_S = 28 * 86_400.0
REFIT_BINS = 6
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
    row = store.stored_forecaster(engine, partition)
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


def fit(engine: Engine, partition: str, s: LoadSeries, anchors: tuple[int, ...], save: bool = True) -> Resident:
    """Fit on ``s`` (when it is long enough) and store the result, the quantile models in the same blob; a
    read-only store only costs the saving."""
    model = DemandForecaster(anchors=anchors)
    if len(s) <= model.min_train_rows:
        return Resident(model, "none")
    model.fit([s])
    quantiles = LoadQuantiles.fit(s, max(model.anchors)) if model.trained else None
    saved = False
    if save and model.trained:
        try:
            blob = to_bytes({**model.arrays(), **(quantiles.arrays() if quantiles else {})})
            store.save_forecaster(engine, partition, float(s.ts[-1]), len(s), SystemClock().now(), model.anchors,
                                  blob)
            saved = True
        except SQLAlchemyError as exc:
            log.warning("could not store the fitted forecaster for %s: %s", partition, exc)
    return Resident(model, "fitted", float(s.ts[-1]), saved, quantiles)


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
        if stored(engine, name, s, ALL_ANCHORS) is not None:
            done[name] = "fresh"
            continue
        done[name] = fit(engine, name, s, ALL_ANCHORS).source
    return done


def describe(r: Resident) -> dict[str, Any]:
    return {"source": r.source, "fitted_ts": r.fitted_ts, "anchors_bins": list(r.model.anchors), "saved": r.saved,
            "quantile_models": r.quantiles is not None}
