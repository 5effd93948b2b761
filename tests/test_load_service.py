"""The live load recorder in the controller loop: a bin per interval from squeue, the forecaster kept fresh,
failures skipped, and the config that turns it on."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sentinel import config as config_mod
from sentinel.capacity.bins import ALL, LoadBin
from sentinel.capacity.bins_store import load_bins, record_load_bins, stored_forecaster
from sentinel.capacity.forecast.resident import refresh
from sentinel.capacity.load.service import LoadService
from sentinel.capacity.load.squeue import SqueueSource
from sentinel.clock import ManualClock
from sentinel.daemon import build_load_service
from sentinel.errors import ConfigError
from sentinel.events import GpuReading, TelemetrySample
from sentinel.store.repository import Repository
from tests.test_load_bins import SQUEUE_2311

START = 1_767_225_600.0  # a multiple of 600


def _history(repo: Repository, days: float) -> float:
    """Bins of a daily rhythm for ``days`` before START; returns START."""
    n = int(days * 144)
    t = np.arange(n)
    run = np.round(6 + 2 * np.sin(2 * np.pi * t / 144))
    record_load_bins(repo.engine, [LoadBin(START - 600.0 * (n - i), ALL, float(run[i]), float(i % 2), 0, 16.0,
                                           None, "squeue") for i in range(n)])
    return START


def test_a_bin_per_interval_at_the_boundary_and_the_forecaster_refitted(repo: Repository) -> None:
    _history(repo, 3.5)
    calls: list[list[str]] = []

    def squeue(argv: list[str]) -> str:
        calls.append(argv)
        return json.dumps(SQUEUE_2311)

    clock = ManualClock(START + 30.0)
    service = LoadService(repo.engine, SqueueSource(squeue), clock, interval_s=600.0, refresher=refresh)
    service.observe([TelemetrySample(node="n1", ts=clock.now(), seq=1, gpus=[GpuReading(index=0, util_gpu_pct=40)])])
    assert service.step() == [] and calls == []  # not due before the next boundary
    clock.advance(600.0)
    bins = service.step()
    assert calls == [["squeue", "--json", "--all"]]
    mine = {b.partition: b for b in bins}
    assert mine[ALL].ts == START and mine[ALL].running_gpus == 8.0 and mine[ALL].util == pytest.approx(0.4)
    assert load_bins(repo.engine, ALL)[-1].ts == START  # the bin [START, START + 600) as it stood when it closed
    row = stored_forecaster(repo.engine, ALL)
    assert row is not None and row["fitted_ts"] == START and 144 in row["anchors"]  # every horizon, 24 h too
    assert service.step() == []  # once per interval


def test_a_failing_squeue_is_skipped_and_the_next_interval_records(repo: Repository,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    answers = iter(["{not json", json.dumps(SQUEUE_2311)])
    clock = ManualClock(START)
    service = LoadService(repo.engine, SqueueSource(lambda argv: next(answers)), clock, interval_s=60.0)
    clock.advance(60.0)
    assert service.step() == [] and "load bins not recorded" in caplog.text
    clock.advance(60.0)
    assert service.step() and service.recorded > 0
    assert stored_forecaster(repo.engine, ALL) is None  # refit off


@pytest.mark.parametrize(("raw", "records"), [
    ({}, False),
    ({"actuator": {"kind": "slurm"}}, True),
    ({"actuator": {"kind": "slurm"}, "load": {"record": "off"}}, False),
    ({"load": {"record": "squeue", "interval_s": 60}}, True),
])
def test_auto_records_from_squeue_only_with_the_slurm_actuator(repo: Repository, raw: dict[str, object],
                                                               records: bool) -> None:
    cfg = config_mod.from_mapping(raw)
    service = build_load_service(cfg, repo.engine, ManualClock())
    assert (service is not None) is records


def test_a_bad_interval_names_its_path() -> None:
    with pytest.raises(ConfigError, match="load.interval_s"):
        config_mod.from_mapping({"load": {"interval_s": 3600}})


def test_hourly_refits_keep_the_quantile_models_for_a_day_then_fit_them_again(repo: Repository) -> None:
    """The load recorder refits the point forecaster every hour; the quantile models (4-6 times its cost) are
    kept from the last fit that made them, with the same horizons, until a day of newer bins arrived."""
    from sentinel.capacity.forecast.resident import Q_FITTED, history, resident
    from sentinel_models.forecast_trees import from_bytes

    start = _history(repo, 5.0)

    def stored_blob() -> tuple[float, dict[str, np.ndarray]]:
        row = stored_forecaster(repo.engine, ALL)
        assert row is not None
        return float(row["fitted_ts"]), from_bytes(bytes(row["blob"]))

    def add_bins(hours: float, first: float) -> float:
        n = int(hours * 6)
        record_load_bins(repo.engine, [LoadBin(first + 600.0 * i, ALL, 7.0, 1.0, 0, 16.0, None, "squeue")
                                       for i in range(n)])
        return first + 600.0 * n

    assert refresh(repo.engine) == {ALL: "fitted"}
    fitted, blob = stored_blob()
    q_fitted = float(blob[Q_FITTED][0])
    assert q_fitted == fitted == start - 600.0
    nxt = add_bins(1.0, start)  # an hour later: the point model is refitted, the quantile set kept as it was
    assert refresh(repo.engine) == {ALL: "fitted"}
    fitted2, blob2 = stored_blob()
    assert fitted2 == nxt - 600.0 and float(blob2[Q_FITTED][0]) == q_fitted
    kept = [k for k in blob if k.startswith("q")]
    assert kept and all(np.array_equal(blob[k], blob2[k]) for k in kept)
    warm = resident(repo.engine, ALL, history(repo.engine, ALL), (6, 18))
    assert warm.source == "stored" and warm.quantiles is not None
    add_bins(24.0, nxt)  # a day later: fitted again
    refresh(repo.engine)
    fitted3, blob3 = stored_blob()
    assert float(blob3[Q_FITTED][0]) == fitted3 > q_fitted
    # the command's --refit fits everything, the quantile models too
    forced = resident(repo.engine, ALL, history(repo.engine, ALL), (6, 18, 36, 144), refit=True)
    assert forced.source == "fitted" and forced.quantiles is not None
