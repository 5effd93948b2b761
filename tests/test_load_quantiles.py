"""The stored set of quantile models of a partition's load bins: fitted for the horizons asked, read back from
numpy arrays, and asked for the quantile table at the newest bin."""

from __future__ import annotations

import numpy as np

from sentinel_models.forecast import LoadSeries
from sentinel_models.forecast_trees import from_bytes, to_bytes
from sentinel_models.load_quantiles import LoadQuantiles


def _series(days: int = 5) -> LoadSeries:
    t = np.arange(days * 144)
    rng = np.random.default_rng(0)
    running = np.clip(np.round(24 + 10 * np.sin(2 * np.pi * t / 144) + rng.normal(0, 2, t.size)), 0, 32)
    pending = np.maximum(np.round(4 * np.sin(2 * np.pi * t / 144) + rng.normal(0, 1, t.size)), 0)
    return LoadSeries.build("all", 1_767_225_600.0 + 600.0 * t, capacity=np.full(t.size, 32.0),
                            running_gpus=running, pending_gpus=pending)


def test_the_set_covers_only_the_horizons_fitted_and_answers_none_beyond_them() -> None:
    s = _series()
    fitted = LoadQuantiles.fit(s, 18)
    assert sorted(fitted.models) == [("pending_gpus", 6), ("pending_gpus", 18), ("running_gpus", 6),
                                     ("running_gpus", 18)]
    table = fitted.table(s, 18)
    assert table is not None and list(table["running_gpus"]) == ["1h", "3h"]
    for per_h in table.values():
        assert all(0 <= v["p10"] <= v["p50"] <= v["p90"] for v in per_h.values())
    assert all(v["p90"] <= 32 for v in table["running_gpus"].values())  # never above the capacity now
    assert fitted.table(s, 36) is None  # 6 h asked, no model for it: the caller falls back


def test_the_set_reads_back_from_arrays_beside_other_keys_and_an_older_blob_has_none() -> None:
    s = _series()
    fitted = LoadQuantiles.fit(s, 18)
    data = from_bytes(to_bytes({"meta": np.zeros(3, np.uint8), **fitted.arrays()}))
    back = LoadQuantiles.from_arrays(data)
    assert back is not None and back.table(s, 18) == fitted.table(s, 18)
    assert LoadQuantiles.from_arrays({"meta": np.zeros(3, np.uint8)}) is None


def test_each_pair_keeps_the_persistence_weight_it_chose_and_a_blob_from_before_the_prior_is_not_used() -> None:
    s = _series()
    fitted = LoadQuantiles.fit(s, 18)
    assert set(fitted.weights) == set(fitted.models)
    assert set(fitted.weights.values()) <= {1.0, 0.9}
    back = LoadQuantiles.from_arrays(fitted.arrays())
    assert back is not None and back.weights == fitted.weights
    # stored before the prior: its trees forecast the change from the value now, so they are refitted, not reused
    assert LoadQuantiles.from_arrays({k: v for k, v in fitted.arrays().items() if k != "q_prior"}) is None
