"""The forecast verb: ``sentinel forecast`` (parser and handler)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from sentinel.cli.verbs import EXIT_OK, open_repo, out
from sentinel.clock import SystemClock
from sentinel.errors import ValidationError
from sentinel.events import NODE_NAME_PATTERN
from sentinel.tables import parse_duration


def add_forecast_verbs(verb: Callable[..., argparse.ArgumentParser]) -> None:
    """Register ``forecast`` (with ``verb``, cli.py's helper)."""
    fc = verb("forecast", "forecast GPU demand (running, pending) with intervals, the nodes at risk and the "
                          "capacity outlook, from the store's load bins and findings", cmd_forecast)
    fc.add_argument("--horizon", default="3h", metavar="DURATION", help="how far ahead, 10m to 24h (default 3h; "
                                                                        "beyond 3h the table is hourly)")
    fc.add_argument("--partition", metavar="P", help="scheduler partition (default: all, the whole cluster)")
    fc.add_argument("--plot", metavar="FILE.png", help="also draw the forecast as a PNG (needs the plot extra)")
    fc.add_argument("--top", type=int, default=10, help="nodes at risk to list (default 10)")
    fc.add_argument("--save", action="store_true",
                    help="also store the forecast (forecasts table) and the model it fitted, if any")
    fc.add_argument("--refit", action="store_true", help="fit the demand model now instead of using the stored one "
                                                         "(it is refitted anyway once 6 newer bins arrived)")


def cmd_forecast(args: argparse.Namespace) -> int:
    from sentinel.capacity.forecast.outlook import build_report
    from sentinel.capacity.forecast.render import render_report

    if args.partition is not None and not re.match(NODE_NAME_PATTERN, args.partition):
        raise ValidationError(f"--partition {args.partition!r}: not a valid partition name")
    if args.top < 0:
        raise ValidationError("--top must be >= 0")
    horizon_s = parse_duration(args.horizon)
    repo = open_repo(args)
    report = build_report(repo.engine, args.partition, horizon_s, top=args.top, refit=args.refit,
                          save_model=args.save)  # a plain forecast reads; only --save writes
    text = render_report(report)
    if args.plot:
        from sentinel.capacity.forecast.plot import plot_report

        plot_report(report, args.plot)
        text += f"\nplot written to {args.plot}"
    if args.save and report["forecast"]:
        from sentinel.capacity.bins_store import save_forecast

        made = SystemClock().now()
        save_forecast(repo.engine, [
            {"made_ts": made, "partition": report["partition"], "target": target, "method": report["method"],
             **{k: p[k] for k in ("ts", "point", "lo", "hi")}}
            for target, points in report["forecast"].items() for p in points])
        text += "\nforecast stored in the forecasts table"
    out(args, report, text)
    return EXIT_OK
