"""The capacity outlook as Prometheus gauges: what ``SentinelForecastCapacityShortfall`` and
``SentinelForecastStale`` read. The controller (and ``sentinel run``) publish it each time new load bins are
stored, so the gauges are as fresh as the bins (10 minutes)."""

from __future__ import annotations

from sqlalchemy import Engine

from sentinel.capacity.bins import BIN_S
from sentinel.capacity.forecast.outlook import build_report
from sentinel.clock import Clock
from sentinel.obs.metrics import ForecastMetrics

HORIZONS = {"1h": 3600.0, "3h": 3 * 3600.0}  # the horizons the alert rules and the dashboard read


def publish_outlook(engine: Engine, metrics: ForecastMetrics, clock: Clock) -> dict[str, float]:
    """Forecast the whole cluster's demand and losses and set the gauges per horizon; return the margins
    (healthy GPUs - expected losses - the upper bound of demand). Nothing is set without a fleet-wide forecast
    (no load bins yet, or no nodes): the stale alert then stays quiet, as nothing was ever published."""
    report = build_report(engine, None, max(HORIZONS.values()), top=0, clock=clock)
    running = report["forecast"].get("running_gpus", [])
    pending = report["forecast"].get("pending_gpus", [])
    if "outlook" not in report or not running or not pending:
        return {}
    risk, as_of, now = report["risk"], report["as_of"], clock.now()
    margins = {}
    for name, ahead in HORIZONS.items():
        # the first bin that ends at least `ahead` after the forecast was made (else the last one)
        i = next((k for k, r in enumerate(running) if r["ts"] + BIN_S - as_of >= ahead), len(running) - 1)
        r, p = running[i], pending[i]
        mean = max(r["point"] + p["point"], 0.0)
        lower = min(max(r["lo"] + p["lo"], 0.0), mean)
        upper = max(r["hi"] + p["hi"], mean)
        margins[name] = metrics.set_forecast(name, mean, lower, upper, max(risk["expected_gpus_lost"], 0.0),
                                             float(risk["healthy_gpus"]), now)
    return margins
