"""Demand forecaster: running GPUs, pending GPUs (the queue) and submissions at 10-minute bins, 10 min to 3 h
ahead (and a coarse 24 h), with prediction intervals.

Model: one scikit-learn ``HistGradientBoostingRegressor`` per target and anchor horizon (direct strategy), fitted
with the median (quantile 0.5) loss on the change from the last known bin divided by the partition's capacity,
from ``models.calendar_features``. One model serves every partition given to ``fit`` (pooled, scale-free).
Horizons between anchors interpolate the anchors' changes linearly. Calibration: the model is first fitted on
the older 80 % of the rows and judged on the newest 20 %. There it picks a persistence gate per target and
horizon (a forecast change of at most ``gate`` GPUs becomes "no change"; ``inf`` means the last value wins), the
gate with the lowest sMAPE, because load moves in steps and persistence is hard to beat; and it keeps the 10 %
and 90 % quantiles of the gated errors as the interval (the empirical 80 % range of recent out-of-sample
errors). The model so judged is the one kept, so gate, interval and model agree; forecasts still read the
newest bins as lags. Fits run on one thread: on a busy host OpenMP threads cost more than they give.

Online update: ``update`` takes the grown history and refits from scratch over a sliding window (``max_history``
bins) once ``refit_every`` new bins arrived; between refits every forecast already uses the newest bins as
lags. Gradient boosting has no incremental fit, and a refit of these small models takes about a second.

Fitting needs scikit-learn; forecasting does not: each fitted model becomes a ``models.forecast_trees.Trees``
(numpy arrays), so a forecaster saved with ``to_bytes`` and read back with ``from_bytes`` (the store's
``forecast_models`` table) answers without importing scikit-learn, which is most of a cold command's time.

Fallback: with fewer than ``LOOKBACK + min_train_rows`` bins (a fresh store, the demo's first hour) there is no
model; the forecast is the last value (method ``last_value``) with intervals from the last value's own past
errors when there are any, and a note says why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from sentinel_models.calendar_features import DAY, LOOKBACK, SeriesFeatures
from sentinel_models.forecast_trees import Trees, from_bytes, to_bytes

if TYPE_CHECKING:
    from sklearn.ensemble import HistGradientBoostingRegressor

ANCHORS = (1, 6, 18)  # 10 min, 1 h, 3 h
COARSE = (36, 72, 144)  # 6 h, 12 h, 24 h
OTHER = {"running_gpus": "pending_gpus", "pending_gpus": "running_gpus", "submissions": "pending_gpus"}
GATES = (0.0, 1.0, 2.0, 4.0, 8.0, float("inf"))  # GPUs; chosen per target and horizon on held-out bins
PARAMS: dict[str, Any] = {"loss": "quantile", "quantile": 0.5, "max_iter": 60, "learning_rate": 0.05,
                          "max_leaf_nodes": 15, "min_samples_leaf": 40, "early_stopping": False, "random_state": 0}


@dataclass(frozen=True)
class LoadSeries:
    """One partition's load at consecutive bins (``ts`` bin starts, evenly spaced)."""

    name: str
    ts: np.ndarray
    columns: dict[str, np.ndarray]  # running_gpus, pending_gpus, optionally submissions
    capacity: np.ndarray  # GPUs of the partition per bin (the scale of every feature)

    def __len__(self) -> int:
        return len(self.ts)

    @classmethod
    def build(cls, name: str, ts: ArrayLike, capacity: ArrayLike | None = None, **columns: ArrayLike) -> LoadSeries:
        cols = {k: np.asarray(v, dtype=float) for k, v in columns.items()}
        ts = np.asarray(ts, dtype=float)
        cap = np.full(len(ts), np.nan) if capacity is None else np.asarray(capacity, dtype=float)
        if np.isnan(cap).all():  # unknown capacity: the largest demand seen stands in for it
            peak = max((float(np.nanmax(cols[k])) for k in ("running_gpus", "pending_gpus") if k in cols and len(ts)),
                       default=1.0)
            cap = np.full(len(ts), max(peak, 1.0))
        cap = np.where(np.isnan(cap), np.nanmax(cap), cap)
        return cls(name, ts, cols, cap)


@dataclass(frozen=True)
class ForecastPoint:
    ts: float  # start of the bin forecast
    point: float
    lo: float
    hi: float


@dataclass
class Forecast:
    partition: str
    origin_ts: float  # start of the last bin known
    method: str  # gradient_boosting | last_value
    targets: dict[str, list[ForecastPoint]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class DemandForecaster:
    def __init__(self, anchors: Sequence[int] = ANCHORS + COARSE, quantiles: tuple[float, float] = (0.1, 0.9),
                 refit_every: int = 6, max_history: int = 28 * DAY, min_train_rows: int = 2 * DAY,
                 calibrate: bool = True, params: dict[str, Any] | None = None) -> None:
        self.anchors = tuple(sorted(anchors))
        self.quantiles = quantiles
        self.refit_every, self.max_history, self.min_train_rows = refit_every, max_history, min_train_rows
        self.calibrate = calibrate
        self.params = {**PARAMS, **(params or {})}
        self.models: dict[tuple[str, int], Trees] = {}
        self.spread: dict[tuple[str, int], tuple[float, float]] = {}  # residual quantiles (scaled)
        self.gate: dict[tuple[str, int], float] = {}  # changes up to this many GPUs are forecast as no change
        self.fitted_len: dict[str, int] = {}
        self.fitted_ts: dict[str, float] = {}  # per series, the start of the newest bin the fit saw

    # ----- fitting ---------------------------------------------------------------------------------------------
    def fit(self, history: Sequence[LoadSeries], targets: Sequence[str] | None = None) -> DemandForecaster:
        from threadpoolctl import threadpool_limits  # fitting only: forecasting needs neither this nor sklearn

        with threadpool_limits(1):
            return self._fit(history, targets)

    def _fit(self, history: Sequence[LoadSeries], targets: Sequence[str] | None) -> DemandForecaster:
        history = [self._window(s) for s in history]
        targets = targets or [t for t in OTHER if all(t in s.columns for s in history)]
        self.models.clear()
        self.spread.clear()
        self.gate.clear()
        for target in targets:
            feats = [SeriesFeatures(s.columns[target], s.columns[OTHER[target]], s.capacity, s.ts) for s in history]
            for h in self.anchors:
                self._fit_one(target, h, history, feats)
        self.fitted_len = {s.name: len(s) for s in history}
        self.fitted_ts = {s.name: float(s.ts[-1]) for s in history if len(s)}
        return self

    def _window(self, s: LoadSeries) -> LoadSeries:
        if len(s) <= self.max_history:
            return s
        cut = slice(len(s) - self.max_history, None)
        return LoadSeries(s.name, s.ts[cut], {k: v[cut] for k, v in s.columns.items()}, s.capacity[cut])

    def _fit_one(self, target: str, h: int, history: list[LoadSeries], feats: list[SeriesFeatures]) -> None:
        parts = []
        for s, f in zip(history, feats, strict=True):
            k = np.arange(LOOKBACK, len(s) - h)
            if k.size:
                y = s.columns[target]
                parts.append((k, f.matrix(k, h), (y[k + h] - y[k]) / f.scale[k], y[k], f.scale[k]))
        rows = sum(len(p[0]) for p in parts)
        if rows < self.min_train_rows:
            return
        X = np.vstack([p[1] for p in parts])
        Y = np.concatenate([p[2] for p in parts])
        if self.calibrate:
            # hold out the newest 20 % of each series' origins: choose the gate, then keep the error quantiles
            recent = np.concatenate([p[0] >= np.quantile(p[0], 0.8) for p in parts])
            level, scale = np.concatenate([p[3] for p in parts])[recent], np.concatenate([p[4] for p in parts])[recent]
            early = Trees.from_sklearn(self._new().fit(X[~recent], Y[~recent]))
            change = early.predict(X[recent])
            truth = level + Y[recent] * scale
            self.gate[(target, h)] = min(GATES, key=lambda g: float(np.mean(
                _smape(truth, np.maximum(level + _gated(change, scale, g) * scale, 0.0)))))
            errors = Y[recent] - _gated(change, scale, self.gate[(target, h)])
            self.spread[(target, h)] = (float(np.quantile(errors, self.quantiles[0])),
                                        float(np.quantile(errors, self.quantiles[1])))
            self.models[(target, h)] = early
        else:
            self.models[(target, h)] = Trees.from_sklearn(self._new().fit(X, Y))

    def _new(self) -> HistGradientBoostingRegressor:
        from sklearn.ensemble import HistGradientBoostingRegressor

        return HistGradientBoostingRegressor(**self.params)

    def update(self, history: Sequence[LoadSeries]) -> bool:
        """Online update with the grown history: refit once ``refit_every`` bins arrived since the last fit."""
        grown = max((len(s) - self.fitted_len.get(s.name, 0) for s in history), default=0)
        if self.fitted_len and grown < self.refit_every:
            return False
        self.fit(history)
        return True

    @property
    def trained(self) -> bool:
        return bool(self.models)

    # ----- persistence ----------------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The fitted forecaster (models, gates, intervals, what it was fitted on) as one compressed blob."""
        return to_bytes(self.arrays())

    def arrays(self) -> dict[str, np.ndarray]:
        """The blob's contents as named arrays (keys ``meta`` and ``m<i>_*``), so a caller can store more beside
        them in the same blob; ``from_arrays`` ignores keys it does not know."""
        keys = sorted(self.models)
        meta = {"version": 1, "anchors": list(self.anchors), "quantiles": list(self.quantiles),
                "refit_every": self.refit_every, "max_history": self.max_history,
                "min_train_rows": self.min_train_rows, "keys": [[t, h] for t, h in keys],
                "gate": [self.gate.get(k, 0.0) for k in keys], "spread": [self.spread.get(k, (0.0, 0.0)) for k in keys],
                "fitted_len": self.fitted_len, "fitted_ts": self.fitted_ts}
        arrays: dict[str, np.ndarray] = {"meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
        for i, key in enumerate(keys):
            arrays.update(self.models[key].arrays(f"m{i}_"))
        return arrays

    @classmethod
    def from_bytes(cls, blob: bytes) -> DemandForecaster:
        return cls.from_arrays(from_bytes(blob))

    @classmethod
    def from_arrays(cls, data: dict[str, np.ndarray]) -> DemandForecaster:
        meta = json.loads(data["meta"].tobytes().decode())
        if meta.get("version") != 1:
            raise ValueError(f"unknown forecaster format {meta.get('version')!r}")
        out = cls(anchors=meta["anchors"], quantiles=tuple(meta["quantiles"]), refit_every=meta["refit_every"],
                  max_history=meta["max_history"], min_train_rows=meta["min_train_rows"])
        for i, (target, h) in enumerate(meta["keys"]):
            key = (str(target), int(h))
            out.models[key] = Trees.from_arrays(data, f"m{i}_")
            out.gate[key] = float(meta["gate"][i])
            out.spread[key] = (float(meta["spread"][i][0]), float(meta["spread"][i][1]))
        out.fitted_len = {str(k): int(v) for k, v in meta["fitted_len"].items()}
        out.fitted_ts = {str(k): float(v) for k, v in meta["fitted_ts"].items()}
        return out

    # ----- forecasting -----------------------------------------------------------------------------------------
    def predict_change(self, s: LoadSeries, target: str, origins: np.ndarray, h: int) -> np.ndarray:
        """Point forecasts of ``target`` at ``origins + h`` (vectorised; used by the benchmark)."""
        model = self.models[(target, h)]
        f = SeriesFeatures(s.columns[target], s.columns[OTHER[target]], s.capacity, s.ts)
        y, scale = s.columns[target], f.scale[origins]
        raw = model.predict(f.matrix(origins, h))
        change = _gated(raw, scale, self.gate.get((target, h), 0.0))
        return np.maximum(y[origins] + change * scale, 0.0)

    def forecast(self, s: LoadSeries, horizon_bins: int = 18) -> Forecast:
        """Forecast every bin from the next one to ``horizon_bins`` ahead (at most one day)."""
        horizon_bins = min(max(horizon_bins, 1), DAY)
        if len(s) == 0:
            return Forecast(s.name, 0.0, "none", notes=["no load bins recorded yet"])
        k = len(s) - 1
        step = float(s.ts[1] - s.ts[0]) if len(s) > 1 else 600.0
        usable = [h for h in self.anchors if h <= max(horizon_bins, self.anchors[0])]
        targets = [t for t in OTHER if t in s.columns]
        ready = k >= LOOKBACK and all((t, h) in self.models for t in targets for h in usable)
        out = Forecast(s.name, float(s.ts[k]), "gradient_boosting" if ready else "last_value")
        if not ready:
            out.notes.append(f"{len(s)} bins of history ({len(s) * step / 3600:.1f} h): too short to train "
                             f"(needs {(LOOKBACK + self.min_train_rows) * step / 86400:.0f} days); "
                             "showing the last value, intervals from its own past errors")
        for target in targets:
            out.targets[target] = (self._model_path(s, target, k, usable, horizon_bins, step) if ready
                                   else _last_value(s, target, horizon_bins, step))
        if "running_gpus" in out.targets:  # no more GPUs can run than the partition has now
            cap = float(s.capacity[k])
            out.targets["running_gpus"] = [ForecastPoint(p.ts, min(p.point, cap), min(p.lo, cap), min(p.hi, cap))
                                           for p in out.targets["running_gpus"]]
        return out

    def _model_path(self, s: LoadSeries, target: str, k: int, anchors: list[int], horizon: int,
                    step: float) -> list[ForecastPoint]:
        f = SeriesFeatures(s.columns[target], s.columns[OTHER[target]], s.capacity, s.ts)
        origin = np.array([k])
        change = {0: (0.0, 0.0, 0.0)}
        for h in anchors:
            raw = self.models[(target, h)].predict(f.matrix(origin, h))
            mid = float(_gated(raw, f.scale[origin], self.gate.get((target, h), 0.0))[0])
            lo, hi = self.spread.get((target, h), (0.0, 0.0))
            change[h] = (mid, mid + lo, mid + hi)
        keys = sorted(change)
        level, scale = float(s.columns[target][k]), float(f.scale[k])
        points = []
        for h in range(1, horizon + 1):
            mid, lo, hi = (float(np.interp(h, keys, [change[a][i] for a in keys])) for i in range(3))
            point = max(level + mid * scale, 0.0)
            points.append(ForecastPoint(float(s.ts[k] + h * step), point, max(min(level + lo * scale, point), 0.0),
                                        max(level + hi * scale, point)))
        return points


def _last_value(s: LoadSeries, target: str, horizon: int, step: float) -> list[ForecastPoint]:
    y = s.columns[target]
    level = float(y[-1])
    points = []
    for h in range(1, horizon + 1):
        errors = y[h:] - y[:-h] if len(y) > h + 5 else np.zeros(1)
        lo, hi = float(np.quantile(errors, 0.1)), float(np.quantile(errors, 0.9))
        points.append(ForecastPoint(float(s.ts[-1] + h * step), level, max(level + min(lo, 0.0), 0.0),
                                    level + max(hi, 0.0)))
    return points


def _smape(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    denom = np.abs(y) + np.abs(f)
    return np.where(denom == 0, 0.0, 2.0 * np.abs(y - f) / np.where(denom == 0, 1.0, denom))


def _gated(change: np.ndarray, scale: np.ndarray, gate: float) -> np.ndarray:
    """Scaled changes with those of at most ``gate`` GPUs set to 0 (``inf``: always the last value)."""
    return np.where(np.abs(change * scale) > gate, change, 0.0)
