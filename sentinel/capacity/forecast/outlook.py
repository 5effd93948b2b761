"""One forecast report from the store: demand per bin with intervals, the risk of losing nodes, and the capacity
outlook (healthy GPUs minus expected losses, against forecast demand = running + pending GPUs).

Risk and healthy capacity are fleet-wide (nodes carry no partition in the store), so the outlook is given for
the whole-cluster partition ``all`` (or the only partition there is); other partitions get demand only.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import Engine

from sentinel.capacity import bins_store as store
from sentinel.capacity.bins import ALL, BIN_S
from sentinel.capacity.forecast import resident as models
from sentinel.capacity.forecast.risk import FailureModel, FindingsRisk, RiskForecast, forecast_risk
from sentinel.clock import Clock, SystemClock
from sentinel.errors import ValidationError
from sentinel_models.calendar_features import DAY
from sentinel_models.forecast import ANCHORS, COARSE, Forecast, LoadSeries
from sentinel_models.quantile_scores import HORIZONS

RISK_LOOKBACK_S = 86_400.0
QUANTILE_MODELS = "quantile models of the aggregate load bins"  # quantiles_from when the quantile models answer


def horizon_bins(horizon_s: float) -> int:
    if not BIN_S <= horizon_s <= DAY * BIN_S:
        raise ValidationError(f"--horizon must be between 10m and 24h, got {horizon_s / 3600:g}h")
    return int(math.ceil(horizon_s / BIN_S))


def _anchors(bins: int) -> tuple[int, ...]:
    """Only the anchors the horizon needs (fewer models, a faster answer)."""
    every = ANCHORS + COARSE
    upto = [a for a in every if a < bins]
    return (*upto, min(a for a in every if a >= bins))


def choose_partition(engine: Engine, wanted: str | None) -> str | None:
    known = store.partitions(engine)
    if wanted is not None:
        if wanted not in known:
            names = ", ".join(sorted(known)) or "none recorded yet"
            raise ValidationError(f"--partition {wanted!r}: no load bins for it (partitions: {names})")
        return wanted
    if not known:
        return None
    return ALL if ALL in known else sorted(known)[0]


def demand(engine: Engine, partition: str, bins: int, refit: bool = False, save_model: bool = True
           ) -> tuple[Forecast, LoadSeries, dict[str, Any], dict[str, dict[str, dict[str, float]]] | None]:
    """The forecast from the stored forecaster when fresh, else from a new fit (stored when ``save_model``), and
    the quantile table from the quantile models fitted with it (None: none were, e.g. an older stored blob)."""
    s = models.history(engine, partition)
    found = models.resident(engine, partition, s, _anchors(bins), refit, save=save_model)
    table = found.quantiles.table(s, bins) if found.quantiles is not None else None
    return found.model.forecast(s, bins), s, models.describe(found), table


def build_report(engine: Engine, partition: str | None = None, horizon_s: float = 3 * 3600.0,
                 failure_model: FailureModel | None = None, top: int = 10, refit: bool = False,
                 clock: Clock | None = None, save_model: bool = True) -> dict[str, Any]:
    bins = horizon_bins(horizon_s)
    chosen = choose_partition(engine, partition)
    notes: list[str] = []
    forecast, history, fitted, table = ((None, None, {}, None) if chosen is None
                                        else demand(engine, chosen, bins, refit, save_model))
    if forecast is None:
        notes.append("no load bins recorded yet: record them from the scheduler (see docs/forecast.md)")
    else:
        notes += forecast.notes
    now = (clock or SystemClock()).now()
    as_of = forecast.origin_ts + BIN_S if forecast is not None and forecast.origin_ts else now
    model: FailureModel = failure_model or FindingsRisk(
        store.risk_findings(engine, as_of - RISK_LOOKBACK_S, as_of + BIN_S))
    source = "findings" if failure_model is None else type(failure_model).__name__
    nodes = store.fleet_nodes(engine)
    risk = forecast_risk(nodes, model, horizon_s, top, source)
    report: dict[str, Any] = {
        "partition": chosen,
        "as_of": as_of,
        "horizon_s": horizon_s,
        "method": forecast.method if forecast else "none",
        "model": fitted,
        "inputs": _inputs(history),
        "quantiles": table or _quantiles(forecast),
        "quantiles_from": QUANTILE_MODELS if table else "aggregate load bins",
        "notes": notes,
        "history": _history(history),
        "forecast": {t: [vars(p) for p in pts] for t, pts in (forecast.targets.items() if forecast else [])},
        "risk": _risk(risk),
    }
    if history is not None and chosen is not None:
        from sentinel.capacity.forecast.job_quantiles import job_quantiles

        from_jobs, used = job_quantiles(engine, chosen, history, bins)
        if from_jobs:
            report.update(quantiles=from_jobs, quantiles_from=used, inputs=f"{used} and {report['inputs']}")
        elif used:
            notes.append(used)
    fleet_wide = chosen in (None, ALL) or len(store.partitions(engine)) == 1
    if forecast is not None and fleet_wide and nodes:
        report["outlook"] = _outlook(forecast, risk, model, nodes, as_of)
    elif forecast is not None and not nodes:
        notes.append("no nodes in the store: no capacity outlook")
    elif forecast is not None:
        notes.append("capacity outlook is fleet-wide: see --partition all")
    return report


def _inputs(s: LoadSeries | None) -> str:
    """What the forecast read: the store holds aggregate load bins only (no job table is recorded yet)."""
    if s is None or not len(s):
        return "none"
    return f"aggregate load bins ({len(s)} bins of 10 min)"


def _quantiles(forecast: Forecast | None) -> dict[str, dict[str, dict[str, float]]]:
    """p10, p50, p90 per target at 1 h, 3 h, 6 h and 24 h (those within the horizon) when no quantile models
    were fitted with the forecaster (a blob stored before them): the forecast's interval bounds and point."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for target, points in (forecast.targets.items() if forecast else []):
        for name, bins in HORIZONS.items():
            if bins <= len(points):
                p = points[bins - 1]
                out.setdefault(target, {})[name] = {"p10": round(p.lo, 2), "p50": round(p.point, 2),
                                                    "p90": round(p.hi, 2)}
    return out


def _history(s: LoadSeries | None, keep: int = 36) -> dict[str, Any]:
    if s is None:
        return {}
    return {"ts": s.ts[-keep:].tolist(), **{k: v[-keep:].tolist() for k, v in s.columns.items()},
            "total_gpus": s.capacity[-keep:].tolist()}


def _risk(risk: RiskForecast) -> dict[str, Any]:
    return {
        "horizon_s": risk.horizon_s,
        "source": risk.source,
        "healthy_nodes": risk.healthy_nodes,
        "healthy_gpus": risk.healthy_gpus,
        "expected_nodes_lost": round(risk.expected_nodes_lost, 3),
        "expected_gpus_lost": round(risk.expected_gpus_lost, 3),
        "top_nodes": [{"node": r.node, "p_fail": round(r.p_fail, 3), "gpus": r.gpus, "state": r.state, **r.evidence}
                      for r in risk.top],
    }


def _outlook(forecast: Forecast, risk: RiskForecast, model: FailureModel, nodes: list[dict[str, Any]],
             as_of: float) -> list[dict[str, Any]]:
    healthy = {str(n["name"]): int(n["ok"]) for n in nodes if n.get("drained_incident_id") is None}
    running = forecast.targets.get("running_gpus", [])
    pending = forecast.targets.get("pending_gpus", [])
    out = []
    for r, p in zip(running, pending, strict=True):
        ahead = r.ts + BIN_S - as_of
        if isinstance(model, FindingsRisk):  # one probability for the whole horizon
            lost = risk.expected_gpus_lost
        else:
            lost = sum(prob * healthy.get(n, 0) for n, prob in model.p_fail(list(healthy), ahead).items())
        available = risk.healthy_gpus - lost
        out.append({"ts": r.ts, "available_gpus": round(available, 2), "demand_gpus": round(r.point + p.point, 2),
                    "demand_hi_gpus": round(r.hi + p.hi, 2), "headroom_gpus": round(available - r.point - p.point, 2)})
    return out
