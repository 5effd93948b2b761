"""``sentinel demo``: the real pipeline against a simulated cluster with injected faults."""

from __future__ import annotations

import argparse
import json
import sys

from sentinel.cli.verbs import EXIT_EXPECTATION, EXIT_OK
from sentinel.errors import ValidationError
from sentinel.tables import parse_duration


def cmd_demo(args: argparse.Namespace) -> int:
    from sentinel.cli.demo import DemoOptions, run_demo
    from sentinel.cli.demo_view import expectations_met, render_demo

    if args.db or args.config:
        raise ValidationError("demo builds its own config and store: name its SQLite file with --db-path "
                              "(--db and --config are for the other verbs)")
    as_json = args.json or args.output == "json"
    options = DemoOptions(
        nodes=args.nodes, duration_s=parse_duration(args.duration), seed=args.seed, db_path=args.db_path
    )

    def progress(fraction: float) -> None:
        if not as_json and sys.stderr.isatty():
            print(
                f"\rsimulating {options.nodes} nodes x {options.gpus} GPUs: {fraction:4.0%}",
                end="",
                file=sys.stderr,
                flush=True,
            )

    report = run_demo(options, progress)
    if not as_json and sys.stderr.isatty():
        print(file=sys.stderr)
    print(json.dumps(report.summary, indent=2) if as_json else render_demo(report, program=_program()))
    problems = expectations_met(report.summary)
    for problem in problems:
        print(f"demo: expectation not met: {problem}", file=sys.stderr)
    return EXIT_EXPECTATION if problems else EXIT_OK


def _program() -> str:
    """``sentinel`` when that is what the shell finds, else the path the user ran (``.venv/bin/sentinel`` after
    ``make demo``), so the suggested commands work when pasted."""
    import os
    import shutil

    ran = sys.argv[0]
    if os.path.basename(ran) != "sentinel":
        return "sentinel"  # run as python -m sentinel.cli, or from tests
    found = shutil.which("sentinel")
    return "sentinel" if found and os.path.samefile(found, ran) else os.path.relpath(ran)
