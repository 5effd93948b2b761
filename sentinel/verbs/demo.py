"""``sentinel demo``: the real pipeline against a simulated cluster with injected faults."""

from __future__ import annotations

import argparse
import json
import sys

from sentinel.tables import parse_duration
from sentinel.verbs import EXIT_EXPECTATION, EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from sentinel.demo import DemoOptions, run_demo
    from sentinel.demo_view import expectations_met, render_demo

    options = DemoOptions(
        nodes=args.nodes, duration_s=parse_duration(args.duration), seed=args.seed, db_path=args.db_path
    )

    def progress(fraction: float) -> None:
        if not args.json and sys.stderr.isatty():
            print(
                f"\rsimulating {options.nodes} nodes x {options.gpus} GPUs: {fraction:4.0%}",
                end="",
                file=sys.stderr,
                flush=True,
            )

    report = run_demo(options, progress)
    if not args.json and sys.stderr.isatty():
        print(file=sys.stderr)
    print(json.dumps(report.summary, indent=2) if args.json else render_demo(report))
    problems = expectations_met(report.summary)
    for problem in problems:
        print(f"demo: expectation not met: {problem}", file=sys.stderr)
    return EXIT_EXPECTATION if problems else EXIT_OK
