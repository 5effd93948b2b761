"""The forecast report as text: a table with intervals, a terminal chart, the risk summary and top nodes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sentinel.tables import fmt_ts, render

NAMES = {"running_gpus": "running GPUs", "pending_gpus": "pending GPUs (queue)", "submissions": "submissions"}


def _num(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"


def _cell(p: dict[str, Any]) -> str:
    return f"{_num(p['point'])} [{_num(p['lo'])}-{_num(p['hi'])}]"


def forecast_table(report: dict[str, Any]) -> str:
    fc = report["forecast"]
    if not fc:
        return ""
    n = len(next(iter(fc.values())))
    step = 1 if n <= 18 else 6  # 10-minute rows up to 3 h, hourly beyond
    outlook = {o["ts"]: o for o in report.get("outlook", [])}
    rows = []
    for i in range(step - 1, n, step):
        ts = fc["running_gpus"][i]["ts"]
        row: dict[str, Any] = {"ts": fmt_ts(ts)[5:16], "ahead": f"+{(i + 1) * 10 // 60}h{(i + 1) * 10 % 60:02d}m"}
        for target, points in fc.items():
            row[target] = _cell(points[i])
        if ts in outlook:
            row["available"] = _num(outlook[ts]["available_gpus"])
            row["headroom"] = _num(outlook[ts]["headroom_gpus"])
        rows.append(row)
    columns = [("ts", "bin (UTC)"), ("ahead", "ahead")] + [(t, NAMES.get(t, t)) for t in fc]
    if outlook:
        columns += [("available", "healthy-exp.loss"), ("headroom", "headroom")]
    return render(rows, columns)


def quantile_table(report: dict[str, Any]) -> str:
    by_target = report.get("quantiles") or {}
    horizons = list(dict.fromkeys(h for per in by_target.values() for h in per))
    if not horizons:
        return ""
    rows = [{"target": NAMES.get(t, t), **{h: f"{_num(q['p10'])} / {_num(q['p50'])} / {_num(q['p90'])}"
                                          for h, q in per.items()}} for t, per in by_target.items()]
    return render(rows, [("target", "target"), *[(h, f"+{h}") for h in horizons]])


def chart(history: Sequence[float], forecast: Sequence[dict[str, Any]], title: str, height: int = 8,
          capacity: float | None = None) -> str:
    """History as ``*``, forecast as ``o``, its 80 % interval as ``:``, capacity as ``-``; one column per bin."""
    values = [*history, *(p["hi"] for p in forecast), *(p["lo"] for p in forecast)]
    if capacity is not None and math.isfinite(capacity):
        values.append(capacity)
    top = max(max(values, default=1.0), 1.0)

    def row_of(v: float) -> int:
        return min(height - 1, max(0, int(round(v / top * (height - 1)))))

    width = len(history) + len(forecast)
    grid = [[" "] * width for _ in range(height)]
    if capacity is not None and math.isfinite(capacity):
        grid[row_of(capacity)] = ["-"] * width
    for x, v in enumerate(history):
        grid[row_of(v)][x] = "*"
    for j, p in enumerate(forecast):
        x = len(history) + j
        for r in range(row_of(p["lo"]), row_of(p["hi"]) + 1):
            grid[r][x] = ":"
        grid[row_of(p["point"])][x] = "o"
    label = len(_num(top))
    lines = [f"{title}  (* history, o forecast, : 80% interval" + (", - capacity)" if capacity else ")")]
    for r in range(height - 1, -1, -1):
        edge = _num(top) if r == height - 1 else ("0" if r == 0 else "")
        lines.append(f"{edge:>{label}} |" + "".join(grid[r]).rstrip())
    axis = f"{'':>{label}} +" + "-" * len(history) + "|" + "-" * max(len(forecast) - 1, 0)
    hours = len(history) * 10 / 60
    lines += [axis, f"{'':>{label}}  -{hours:.0f}h" + " " * max(len(history) - 4 - len(f"{hours:.0f}"), 1) + "now"]
    return "\n".join(lines)


def _model_line(report: dict[str, Any]) -> str:
    model = report.get("model") or {}
    if model.get("source") == "stored":
        return f" (model fitted up to the bin at {fmt_ts(model['fitted_ts'])})"
    if model.get("source") == "fitted":
        return " (model fitted now and stored)" if model.get("saved") else " (model fitted now; --save keeps it)"
    return ""


def render_report(report: dict[str, Any]) -> str:
    out = [f"forecast for partition {report['partition'] or '-'} as of {fmt_ts(report['as_of'])} UTC, "
           f"horizon {report['horizon_s'] / 3600:g} h, method {report['method']}{_model_line(report)}"]
    out.append(f"inputs: {report.get('inputs', 'aggregate load bins')}")
    out += [f"note: {n}" for n in report["notes"]]
    quantiles = quantile_table(report)
    if quantiles:
        out += ["", f"quantiles (GPUs): p10 / p50 / p90, from the {report.get('quantiles_from', 'load bins')}",
                quantiles]
    table = forecast_table(report)
    if table:
        out += ["", "demand per bin: p50 [p10-p90, the 80% interval]", table]
        hist = report["history"]
        fc = report["forecast"]
        caps = [c for c in hist.get("total_gpus", []) if math.isfinite(c)]
        for target in ("running_gpus", "pending_gpus"):
            if target in fc:
                cap = caps[-1] if caps and target == "running_gpus" else None
                out += ["", chart(hist.get(target, []), fc[target][:36], NAMES[target], capacity=cap)]
    risk = report["risk"]
    out += ["", f"risk over the next {risk['horizon_s'] / 3600:g} h (source: {risk['source']}): "
                f"{risk['expected_nodes_lost']:.2f} nodes / {risk['expected_gpus_lost']:.1f} GPUs expected lost "
                f"of {risk['healthy_nodes']} healthy nodes / {risk['healthy_gpus']} GPUs"]
    if risk["top_nodes"]:
        rows = [{**r, "ts": fmt_ts(r.get("ts"))} for r in risk["top_nodes"]]
        out.append(render(rows, [("node", "node"), ("p_fail", "p(fail)"), ("gpus", "gpus"), ("state", "state"),
                                 ("rule", "rule"), ("severity", "severity"), ("ts", "last finding"),
                                 ("summary", "evidence")],
                          max_width=60))
    else:
        out.append("no node at risk: no actionable finding in the last 24 h")
    if risk["top_nodes"]:
        out.append("p(fail): confidence of the node's most confident actionable finding in the last 24 h "
                   "(see docs/forecast.md)")
    return "\n".join(out)
