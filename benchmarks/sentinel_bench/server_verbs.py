"""``sentinel-bench smd`` and ``sentinel-bench asd``: server-telemetry anomaly benchmarks (sentinel_bench/server.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sentinel.cli.verbs import EXIT_OK
from sentinel.errors import ValidationError
from sentinel.tables import parse_duration

DATASETS = {
    "smd": "Server Machine Dataset (KDD'19): 38 metrics, 1-minute sampling",
    "asd": "Application Server Dataset (KDD'21): 19 metrics, 5-minute sampling",
}


# benchmarks.server.DEFAULT_INTERVAL_S, repeated so that building the CLI's parser imports no scipy or
# scikit-learn (about a second of every command's start); tests/test_forecast_cli.py checks they agree
DEFAULT_INTERVAL_S = {"smd": 60.0, "asd": 300.0}


def add_server_bench_parsers(bench: Any, common: argparse.ArgumentParser) -> None:
    """Register ``bench smd`` and ``bench asd`` on the ``bench`` subparsers (called from sentinel/cli/main.py)."""
    for name, what in DATASETS.items():
        sub = bench.add_parser(
            name, parents=[common],
            help=f"anomaly detection on {name.upper()} server telemetry beside static thresholds and IsolationForest",
            description=f"Fit on each machine's train file, score its test file, and score the alerts against the "
                        f"labelled segments: {what}. Progress goes to stderr.",
        )
        sub.add_argument("--data", metavar="DIR",
                         help=f"folder of <machine>_train.csv.gz and <machine>_test.csv.gz with a label column "
                              f"(default: $SENTINEL_DATA_DIR/{name}, else ../shared/data/{name})")
        sub.add_argument("--interval", default=f"{DEFAULT_INTERVAL_S[name]:g}s", metavar="DURATION",
                         help=f"sampling interval of the rows (default {DEFAULT_INTERVAL_S[name]:g}s)")
        sub.add_argument("--horizon", default="30m", metavar="DURATION",
                         help="an alert up to this long before a segment starts is a hit, H (default 30m)")
        sub.add_argument("--refractory", default="30m", metavar="DURATION",
                         help="at most one alert per machine within this long (default 30m)")
        sub.add_argument("--budget", type=float, default=1.0, metavar="ALERTS",
                         help="thresholds allow this many alerts per machine-day on the training rows (default 1)")
        sub.add_argument("--choose-on", metavar="DIR",
                         help="also score each detector with the setting chosen on another folder's machines "
                              "alone (a dataset never shown): JSON key transfer")
        sub.add_argument("--choose-on-interval", metavar="DURATION",
                         help="sampling interval of the --choose-on folder (default: --interval)")
        sub.add_argument("--json", action="store_true", help="print results as JSON")
        sub.set_defaults(func=cmd_bench_server, dataset=name)


def cmd_bench_server(args: argparse.Namespace) -> int:
    from sentinel_bench.server import ServerBenchOptions, render_server, run_server_bench
    from sentinel_bench.server_data import default_data_dir

    if args.budget < 0:
        raise ValidationError(f"--budget must be >= 0, got {args.budget}")
    interval = parse_duration(args.interval)
    if interval <= 0:
        raise ValidationError(f"--interval must be > 0, got {args.interval}")
    options = ServerBenchOptions(interval_s=interval, horizon_s=parse_duration(args.horizon),
                                 refractory_s=parse_duration(args.refractory), budget_per_day=args.budget)
    folder = Path(args.data) if args.data else default_data_dir(args.dataset)
    choose_on = None
    if args.choose_on:
        other_interval = parse_duration(args.choose_on_interval) if args.choose_on_interval else interval
        if other_interval <= 0:
            raise ValidationError(f"--choose-on-interval must be > 0, got {args.choose_on_interval}")
        choose_on = (Path(args.choose_on), other_interval)
    result = run_server_bench(args.dataset, folder, options,
                              progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True),
                              choose_on=choose_on)
    print(json.dumps(result, indent=2) if args.json or args.output == "json" else render_server(result))
    return EXIT_OK
