"""Store reads and writes for load bins, forecasts and the inputs of the risk forecast (issue 8).

Functions over an engine (``repo.engine``) rather than more methods on ``Repository``: the load tables are
written by the load recorder and read by ``sentinel forecast`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, func, select

from sentinel.capacity.bins import LoadBin
from sentinel.events import IncidentStatus
from sentinel.store import schema as s
from sentinel.store.sql import upsert

_BIN_COLS = ["running_gpus", "pending_gpus", "submissions", "total_gpus", "util", "source"]


def record_load_bins(engine: Engine, bins: Sequence[LoadBin]) -> None:
    """Store bins; a bin written again (same ts and partition) replaces the earlier one."""
    rows = [{"ts": b.ts, "partition": b.partition, **{c: getattr(b, c) for c in _BIN_COLS}} for b in bins]
    with engine.begin() as conn:
        upsert(conn, s.load_bins, rows, keys=["ts", "partition"], update_cols=_BIN_COLS)


def load_bins(engine: Engine, partition: str, since_ts: float | None = None) -> list[LoadBin]:
    query = select(s.load_bins).where(s.load_bins.c.partition == partition).order_by(s.load_bins.c.ts)
    if since_ts is not None:
        query = query.where(s.load_bins.c.ts >= since_ts)
    with engine.connect() as conn:
        return [LoadBin(**dict(r)) for r in conn.execute(query).mappings()]


def partitions(engine: Engine) -> dict[str, int]:
    """Partitions with stored bins and how many bins each has."""
    query = select(s.load_bins.c.partition, func.count()).group_by(s.load_bins.c.partition)
    with engine.connect() as conn:
        return {str(p): int(n) for p, n in conn.execute(query).all()}


def save_forecast(engine: Engine, rows: Sequence[dict[str, Any]]) -> None:
    """Rows with made_ts, partition, target, ts, point, lo, hi, method."""
    with engine.begin() as conn:
        upsert(conn, s.forecasts, list(rows), keys=["made_ts", "partition", "target", "ts"],
               update_cols=["point", "lo", "hi", "method"])


def save_forecaster(engine: Engine, partition: str, fitted_ts: float, fitted_bins: int, made_ts: float,
                    anchors: Sequence[int], blob: bytes) -> None:
    """Keep one fitted demand forecaster per partition (a newer one replaces it)."""
    row = {"partition": partition, "fitted_ts": fitted_ts, "fitted_bins": fitted_bins, "made_ts": made_ts,
           "anchors": ",".join(str(a) for a in anchors), "blob": blob}
    with engine.begin() as conn:
        upsert(conn, s.forecast_models, [row], keys=["partition"],
               update_cols=["fitted_ts", "fitted_bins", "made_ts", "anchors", "blob"])


def stored_forecaster(engine: Engine, partition: str) -> dict[str, Any] | None:
    """The stored forecaster's row (``anchors`` as a tuple of ints), or None."""
    with engine.connect() as conn:
        query = select(s.forecast_models).where(s.forecast_models.c.partition == partition)
        row = conn.execute(query).mappings().first()
    if row is None:
        return None
    return {**dict(row), "anchors": tuple(int(a) for a in str(row["anchors"]).split(",") if a)}


def fleet_nodes(engine: Engine) -> list[dict[str, Any]]:
    """Every node with its GPU count, healthy GPUs (state ok) and whether Sentinel holds it drained."""
    healthy = (
        select(s.gpus.c.node, func.count().label("ok"))
        .where(s.gpus.c.state == "ok")
        .group_by(s.gpus.c.node)
        .subquery()
    )
    query = select(
        s.nodes.c.name, s.nodes.c.gpu_count, s.nodes.c.drained_incident_id, func.coalesce(healthy.c.ok, 0).label("ok")
    ).outerjoin(healthy, healthy.c.node == s.nodes.c.name)
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def risk_findings(engine: Engine, since_ts: float, until_ts: float) -> list[dict[str, Any]]:
    """Per node, its most confident finding between the two times (ties: the newest) among findings that
    recommend something (alert, checkpoint-drain, drain), with its evidence and the node's open incidents."""
    best = (
        select(
            s.findings.c.node,
            s.findings.c.confidence,
            s.findings.c.ts,
            s.findings.c.rule,
            s.findings.c.severity,
            s.findings.c.summary,
            s.findings.c.evidence,
            s.findings.c.gpu_index,
            func.row_number()
            .over(partition_by=s.findings.c.node, order_by=(s.findings.c.confidence.desc(), s.findings.c.ts.desc()))
            .label("rank"),
        )
        .where(s.findings.c.ts >= since_ts, s.findings.c.ts <= until_ts, s.findings.c.recommendation != "none")
        .subquery()
    )
    open_q = (
        select(s.incidents.c.node, func.count().label("open"))
        .where(s.incidents.c.status != IncidentStatus.RESOLVED.value)
        .group_by(s.incidents.c.node)
        .subquery()
    )
    query = (
        select(best, func.coalesce(open_q.c.open, 0).label("open_incidents"))
        .outerjoin(open_q, open_q.c.node == best.c.node)
        .where(best.c.rank == 1)
    )
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def latest_bin_ts(engine: Engine, partition: str) -> float | None:
    with engine.connect() as conn:
        value = conn.execute(select(func.max(s.load_bins.c.ts)).where(s.load_bins.c.partition == partition)).scalar()
    return None if value is None else float(value)
