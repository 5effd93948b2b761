"""Verbs for operators' tooling: ``sentinel bench alerting`` (Sentinel beside Prometheus static thresholds)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sentinel.verbs import EXIT_OK


def cmd_bench_alerting(args: argparse.Namespace) -> int:
    from sentinel.bench.alerting import CLASSES, Options, render_alerting, run_alerting
    from sentinel.tables import parse_duration

    classes = tuple(c.strip() for c in args.classes.split(",") if c.strip()) if args.classes else CLASSES
    options = Options(per_class=args.per_class, classes=classes, duration_s=parse_duration(args.duration),
                      step_wall_s=args.step_wall, seed=args.seed, model="" if args.model == "none" else args.model,
                      background=args.background == "on")

    def progress(fraction: float) -> None:
        if not (args.json or args.output == "json") and sys.stderr.isatty():
            print(f"\rsimulated time {fraction:4.0%}", end="", file=sys.stderr, flush=True)

    as_json = args.json or args.output == "json"
    result = run_alerting(options, progress)
    if not as_json and sys.stderr.isatty():
        print(file=sys.stderr)
    print(json.dumps(result, indent=2) if as_json else render_alerting(result))
    return EXIT_OK


def add_bench_alerting(bench: Any, common: argparse.ArgumentParser) -> None:
    """Register ``sentinel bench alerting`` on the ``bench`` sub-parsers."""
    about = ("time from fault onset to alert: Sentinel beside a real Prometheus scraping dcgm-exporter-style "
             "endpoints with static-threshold rules, on the same simulated faults and clock")
    p = bench.add_parser("alerting", parents=[common], help=about, description=about)
    p.add_argument("--per-class", type=int, default=3, help="faults per fault class, each on its own node (default 3)")
    p.add_argument("--classes", help="comma-separated fault classes (default: all: hbm, thermal, nvlink, pcie, "
                                     "infiniband, gsp, silent)")
    p.add_argument("--duration", default="40m", help="simulated time, e.g. 40m (default 40m)")
    p.add_argument("--step-wall", type=float, default=0.5, metavar="SECONDS",
                   help="wall seconds per 10 s simulated step, also Prometheus's scrape and rule interval "
                        "(default 0.5: 20x real time)")
    p.add_argument("--seed", type=int, default=11, help="random seed (default 11)")
    p.add_argument("--model", metavar="DIR", help="hazard model directory; `none` for rules only (default: the "
                                                  "model `bench detect` trains on the `train` scenario, cached)")
    p.add_argument("--background", choices=("on", "off"), default="on",
                   help="the healthy-fleet background under the faults (default on; off: a clean fleet)")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.set_defaults(func=cmd_bench_alerting)
