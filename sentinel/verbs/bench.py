"""Verbs that simulate or measure: demo and the benchmarks."""

from __future__ import annotations

import argparse
import json
import sys

from sentinel.errors import ValidationError
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


def cmd_bench_agent(args: argparse.Namespace) -> int:
    from sentinel.bench.agent import render_agent, run_agent_bench

    result = run_agent_bench(args.cycles)
    print(json.dumps(result, indent=2) if args.json else render_agent(result))
    return EXIT_OK


def cmd_bench_pipeline(args: argparse.Namespace) -> int:
    from sentinel.bench.pipeline import render_pipeline, run_pipeline_bench

    result = run_pipeline_bench(args.broker, args.messages, args.nodes,
                                progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True))
    print(json.dumps(result, indent=2) if args.json else render_pipeline(result))
    return EXIT_OK


def cmd_bench_chaos(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from sentinel.bench.chaos import render_chaos, run_chaos
    from sentinel.errors import ConfigError

    slurm_dir = args.slurm_dir or os.environ.get("SENTINEL_TEST_SLURM")
    store = args.store or os.environ.get("SENTINEL_TEST_PG_URL")
    if not slurm_dir or not store:
        raise ConfigError("bench chaos needs --slurm-dir (or $SENTINEL_TEST_SLURM) and --store (or "
                          "$SENTINEL_TEST_PG_URL); see docs/benchmarks.md")
    result = run_chaos(Path(slurm_dir), store, args.duration, args.seed, args.kills, args.broker_restarts,
                       args.slurmctld_restarts,
                       progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True))
    print(json.dumps(result, indent=2) if args.json else render_chaos(result))
    return EXIT_OK


def cmd_bench_codec(args: argparse.Namespace) -> int:
    from sentinel.bench.codec import render_codec, run_codec_bench

    result = run_codec_bench(args.messages)
    print(json.dumps(result, indent=2) if args.json else render_codec(result))
    return EXIT_OK


# ----- parser ---------------------------------------------------------------------------------------------------


def cmd_bench_sim(args: argparse.Namespace) -> int:
    from sentinel.bench.sim import render_sim, run_sim_bench

    result = run_sim_bench(args.scenario, args.steps, background=args.background == "on")
    print(json.dumps(result, indent=2) if args.json else render_sim(result))
    return EXIT_OK


def cmd_bench_detect(args: argparse.Namespace) -> int:
    from sentinel.bench.detect import render_detect, run_detect

    def progress(fraction: float) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"\rscoring {args.scenario}: {fraction:4.0%}", end="", file=sys.stderr, flush=True)

    model = "" if args.model == "none" else args.model
    result = run_detect(args.scenario, args.healthy_sample, progress, args.max_steps, args.max_fraction, model,
                        args.event_windows, background=args.background == "on")
    if not args.json and sys.stderr.isatty():
        print(file=sys.stderr)
    print(json.dumps(result, indent=2) if args.json else render_detect(result))
    return EXIT_OK


def cmd_bench_calibration(args: argparse.Namespace) -> int:
    from sentinel.bench.calibration import plot_calibration, render_calibration, run_calibration

    results = []
    for name in args.scenario:
        if not args.json and sys.stderr.isatty():
            print(f"calibration: simulating and scoring {name}", file=sys.stderr, flush=True)
        results.append(run_calibration(name, args.model, args.background == "on", args.max_steps))
    if args.plot:
        plot_calibration(results, args.plot)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
    else:
        print("\n\n".join(render_calibration(r) for r in results))
    return EXIT_OK


def cmd_bench_goodput(args: argparse.Namespace) -> int:
    from sentinel.bench.goodput import main_progress, render_goodput, run_goodput
    from sentinel.verbs.advise import goodput_overrides

    if args.workers is not None and args.workers < 1:
        raise ValidationError("--workers: must be >= 1")
    model = "" if args.model == "none" else args.model
    result = run_goodput(args.scenario, goodput_overrides(args), args.healthy_nodes, args.max_steps, model,
                         background=args.background == "on", progress=main_progress, workers=args.workers)
    print(json.dumps(result, indent=2) if args.json else render_goodput(result))
    return EXIT_OK
