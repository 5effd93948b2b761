"""Verbs of the forecast area: ``sentinel forecast`` and ``sentinel bench forecast`` (parsers and handlers)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sentinel.errors import ValidationError
from sentinel.events import NODE_NAME_PATTERN
from sentinel.tables import parse_duration
from sentinel.verbs import EXIT_OK, open_repo, out


def add_forecast_verbs(verb: Callable[..., argparse.ArgumentParser], bench: Any,
                       common: argparse.ArgumentParser) -> None:
    """Register ``forecast`` (with ``verb``, cli.py's helper) and ``bench forecast`` on the bench subparsers."""
    fc = verb("forecast", "forecast GPU demand (running, pending) with intervals, the nodes at risk and the "
                          "capacity outlook, from the store's load bins and findings", cmd_forecast)
    fc.add_argument("--horizon", default="3h", metavar="DURATION", help="how far ahead, 10m to 24h (default 3h; "
                                                                        "beyond 3h the table is hourly)")
    fc.add_argument("--partition", metavar="P", help="scheduler partition (default: all, the whole cluster)")
    fc.add_argument("--plot", metavar="FILE.png", help="also draw the forecast as a PNG (needs the plot extra)")
    fc.add_argument("--top", type=int, default=10, help="nodes at risk to list (default 10)")
    fc.add_argument("--save", action="store_true", help="also store the forecast in the forecasts table")
    fc.add_argument("--refit", action="store_true", help="fit the demand model now instead of using the stored one "
                                                         "(it is refitted anyway once 6 newer bins arrived)")
    bf = bench.add_parser("forecast", parents=[common], help="forecaster vs last-value and seasonal-naive "
                                                            "baselines on per-minute cluster load traces")
    bf.add_argument("--data", required=True, metavar="DIR",
                    help="folder with one CSV per virtual cluster (Helios format, e.g. helios/earth_vc_minute)")
    bf.add_argument("--train-days", type=float, default=21.0, help="train on the first N days (default 21)")
    bf.add_argument("--json", action="store_true", help="print results as JSON")
    bf.set_defaults(func=cmd_bench_forecast)
    ff = bench.add_parser("forecast-fleet", parents=[common], help="time `sentinel forecast` on a generated store "
                                                                   "of a large fleet")
    ff.add_argument("--nodes", type=int, default=10_000, help="nodes of 8 GPUs (default 10000)")
    ff.add_argument("--runs", type=int, default=3, help="timed runs (default 3)")
    ff.add_argument("--json", action="store_true", help="print results as JSON")
    ff.set_defaults(func=cmd_bench_forecast_fleet)


def cmd_forecast(args: argparse.Namespace) -> int:
    from sentinel.forecast.outlook import build_report
    from sentinel.forecast.render import render_report

    if args.partition is not None and not re.match(NODE_NAME_PATTERN, args.partition):
        raise ValidationError(f"--partition {args.partition!r}: not a valid partition name")
    if args.top < 0:
        raise ValidationError("--top must be >= 0")
    horizon_s = parse_duration(args.horizon)
    repo = open_repo(args)
    report = build_report(repo.engine, args.partition, horizon_s, top=args.top, refit=args.refit)
    text = render_report(report)
    if args.plot:
        from sentinel.forecast.plot import plot_report

        plot_report(report, args.plot)
        text += f"\nplot written to {args.plot}"
    if args.save and report["forecast"]:
        from sentinel.store.load import save_forecast

        made = time.time()
        save_forecast(repo.engine, [
            {"made_ts": made, "partition": report["partition"], "target": target, "method": report["method"],
             **{k: p[k] for k in ("ts", "point", "lo", "hi")}}
            for target, points in report["forecast"].items() for p in points])
        text += "\nforecast stored in the forecasts table"
    out(args, report, text)
    return EXIT_OK


def cmd_bench_forecast(args: argparse.Namespace) -> int:
    from sentinel.bench.forecast import render_forecast_bench, run_forecast_bench

    result = run_forecast_bench(Path(args.data), args.train_days,
                                progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True))
    print(json.dumps(result, indent=2) if args.json else render_forecast_bench(result))
    return EXIT_OK


def cmd_bench_forecast_fleet(args: argparse.Namespace) -> int:
    from sentinel.bench.forecast_fleet import render_fleet, run_fleet_bench

    if args.nodes < 1 or args.runs < 1:
        raise ValidationError("--nodes and --runs must be >= 1")
    result = run_fleet_bench(args.nodes, args.runs,
                             progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True))
    print(json.dumps(result, indent=2) if args.json else render_fleet(result))
    return EXIT_OK
