"""The quantile models of one partition's load bins, as one set: fitted beside the demand forecaster, stored in
its blob, and asked for p10/p50/p90 of running and pending GPUs at 1 h, 3 h, 6 h and 24 h after the newest bin.

One ``models.forecast_quantiles.QuantileModel`` per target and horizon, on the aggregate-bin rows
(``load_rows``: features relative to the level now; as the baseline the partition's ``models.load_prior``,
persistence plus its own empirical change mixed with its own levels, the weight of persistence chosen on its
newest third of bins). A partition is one series, so the model's blend and widening are chosen on the newest 25 %
of its origins (``QuantileModel.fit``). Fitting needs scikit-learn; ``arrays`` / ``from_arrays`` and ``table``
need numpy only, so a warm ``sentinel forecast`` answers from the stored set without importing scikit-learn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from sentinel_models.calendar_features import DAY, LOOKBACK
from sentinel_models.forecast import LoadSeries
from sentinel_models.forecast_quantiles import QuantileModel, load_rows, training_rows
from sentinel_models.load_prior import LoadPrior, choose_weight
from sentinel_models.quantile_scores import HORIZONS, QUANTILES

TARGETS = ("running_gpus", "pending_gpus")
MIN_ROWS = 2 * DAY  # training origins a horizon needs (the demand forecaster's own minimum)
KEYS = "q_keys"  # the blob key listing the set's (target, horizon) pairs; absent in blobs stored before it
WEIGHTS = "q_prior"  # the blob key of each pair's persistence weight; a blob without it is not used


@dataclass(frozen=True)
class LoadQuantiles:
    models: dict[tuple[str, int], QuantileModel]
    weights: dict[tuple[str, int], float]  # persistence's share of each pair's baseline (models.load_prior)

    @classmethod
    def fit(cls, s: LoadSeries, upto_bins: int) -> LoadQuantiles:
        """One model per target and horizon up to ``upto_bins`` ahead for which ``s`` has ``MIN_ROWS`` origins."""
        models, weights = {}, {}
        for target, h in sorted(cls.keys_for(s, upto_bins)):
            y = s.columns[target]
            weights[(target, h)] = weight = choose_weight([y], h, LOOKBACK)
            models[(target, h)] = QuantileModel().fit([training_rows(s, target, h, weight)])
        return cls(models, weights)

    @staticmethod
    def keys_for(s: LoadSeries, upto_bins: int) -> set[tuple[str, int]]:
        """The (target, horizon) pairs ``fit`` makes on ``s``."""
        return {(target, h) for target in TARGETS if target in s.columns
                for h in HORIZONS.values() if h <= upto_bins and len(s) - h - LOOKBACK >= MIN_ROWS}

    def arrays(self) -> dict[str, np.ndarray]:
        keys = sorted(self.models)
        out = {KEYS: np.frombuffer(json.dumps([[t, h] for t, h in keys]).encode(), dtype=np.uint8),
               WEIGHTS: np.array([self.weights.get(key, 1.0) for key in keys])}
        for i, key in enumerate(keys):
            out.update(self.models[key].arrays(f"q{i}_"))
        return out

    @classmethod
    def from_arrays(cls, data: dict[str, np.ndarray]) -> LoadQuantiles | None:
        """The set stored beside a forecaster, or None when the blob predates it, or predates the prior (its
        trees forecast the change from the value now, not from the prior's median: refitted, not reused)."""
        if KEYS not in data or WEIGHTS not in data:
            return None
        keys = [(str(t), int(h)) for t, h in json.loads(data[KEYS].tobytes().decode())]
        weights = data[WEIGHTS]
        return cls({key: QuantileModel.from_arrays(data, f"q{i}_") for i, key in enumerate(keys)},
                   {key: float(w) for key, w in zip(keys, weights, strict=True)})

    def table(self, s: LoadSeries, horizon_bins: int) -> dict[str, dict[str, dict[str, float]]] | None:
        """``{target: {"1h": {"p10", "p50", "p90"}, ...}}`` at the horizons within ``horizon_bins`` after the
        newest bin of ``s``; None when a horizon asked for has no model or ``s`` is shorter than a day."""
        k = len(s) - 1
        wanted = {name: h for name, h in HORIZONS.items() if h <= horizon_bins}
        targets = [t for t in TARGETS if t in s.columns]
        if k < LOOKBACK or any((t, h) not in self.models for t in targets for h in wanted.values()):
            return None
        out: dict[str, dict[str, dict[str, float]]] = {}
        for target in targets:
            y = s.columns[target]
            for name, h in wanted.items():
                prior = LoadPrior.of(y, h, weight=self.weights.get((target, h), 1.0))
                rows = load_rows(s, target, np.array([k]), h, prior, with_truth=False)
                q = self.models[(target, h)].predict(rows)[0]
                if target == "running_gpus":  # no more GPUs can run than the partition has now
                    q = np.minimum(q, float(s.capacity[k]))
                out.setdefault(target, {})[name] = {f"p{round(level * 100)}": round(float(v), 2)
                                                    for level, v in zip(QUANTILES, q, strict=True)}
        return out
