"""The handlers of ``sentinel-bench``'s subcommands: each runs one benchmark and prints its table or JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sentinel.cli.verbs import EXIT_EXPECTATION, EXIT_OK
from sentinel.errors import ConfigError, ValidationError


def cmd_bench_agent(args: argparse.Namespace) -> int:
    from sentinel_bench.agent import render_agent, run_agent_bench

    result = run_agent_bench(args.cycles)
    print(json.dumps(result, indent=2) if args.json else render_agent(result))
    return EXIT_OK


def cmd_bench_fuzz(args: argparse.Namespace) -> int:
    from sentinel_bench.fuzz import render_fuzz, run_fuzz

    if args.messages < 1:
        raise ValidationError("--messages: must be at least 1")
    result = run_fuzz(args.messages, args.seed,
                      progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True))
    print(json.dumps(result, indent=2) if args.json else render_fuzz(result))
    return EXIT_OK if result["crashes"] == 0 else EXIT_EXPECTATION


def cmd_bench_pipeline(args: argparse.Namespace) -> int:
    from sentinel_bench.pipeline import render_pipeline, run_pipeline_bench

    result = run_pipeline_bench(args.broker, args.messages, args.nodes,
                                progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True),
                                model=args.model, compression=args.compression,
                                node_auth=args.node_auth == "on")
    print(json.dumps(result, indent=2) if args.json else render_pipeline(result))
    return EXIT_OK


def cmd_bench_soak(args: argparse.Namespace) -> int:
    from sentinel.tables import parse_duration
    from sentinel_bench.soak import render_soak, run_soak

    result = run_soak(args.gpus, parse_duration(args.duration), args.interval, args.store, args.faults, args.seed,
                      progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True))
    print(json.dumps(result, indent=2) if args.json else render_soak(result))
    return EXIT_OK


def cmd_bench_chaos(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from sentinel.errors import ConfigError
    from sentinel_bench.chaos import render_chaos, run_chaos

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
    from sentinel_bench.codec import render_codec, run_codec_bench

    result = run_codec_bench(args.messages)
    print(json.dumps(result, indent=2) if args.json else render_codec(result))
    return EXIT_OK


def cmd_bench_sim(args: argparse.Namespace) -> int:
    from sentinel_bench.sim import render_sim, run_sim_bench

    result = run_sim_bench(args.scenario, args.steps, background=args.background == "on")
    print(json.dumps(result, indent=2) if args.json else render_sim(result))
    return EXIT_OK


def cmd_bench_detect(args: argparse.Namespace) -> int:
    from sentinel_bench.detect import render_detect, run_detect

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
    from sentinel_bench.calibration import plot_calibration, render_calibration, run_calibration

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
    from sentinel.cli.verbs.advise import goodput_overrides
    from sentinel_bench.goodput import main_progress, render_goodput, run_goodput

    if args.workers is not None and args.workers < 1:
        raise ValidationError("--workers: must be >= 1")
    model = "" if args.model == "none" else args.model
    result = run_goodput(args.scenario, goodput_overrides(args), args.healthy_nodes, args.max_steps, model,
                         background=args.background == "on", progress=main_progress, workers=args.workers)
    print(json.dumps(result, indent=2) if args.json else render_goodput(result))
    return EXIT_OK


def cmd_bench_alerting(args: argparse.Namespace) -> int:
    from sentinel.tables import parse_duration
    from sentinel_bench.alerting import CLASSES, Options, render_alerting, run_alerting

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


def cmd_bench_forecast(args: argparse.Namespace) -> int:
    from sentinel_bench.forecast import render_forecast_bench, run_forecast_bench

    result = run_forecast_bench(Path(args.data), args.train_days,
                                progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True),
                                leave_one_out=args.leave_one_out)
    print(json.dumps(result, indent=2) if args.json else render_forecast_bench(result))
    return EXIT_OK


def cmd_bench_forecast_jobs(args: argparse.Namespace) -> int:
    from sentinel_bench.forecast_jobs import render_forecast_jobs, run_forecast_jobs_bench

    if args.capacity is not None and args.capacity <= 0:
        raise ValidationError("--capacity must be > 0")
    result = run_forecast_jobs_bench(Path(args.trace), args.submit_col, args.start_col, args.end_col, args.gpus_col,
                                     args.limit_col, args.train_days, args.capacity,
                                     progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True))
    print(json.dumps(result, indent=2) if args.json else render_forecast_jobs(result))
    return EXIT_OK


def cmd_bench_forecast_fleet(args: argparse.Namespace) -> int:
    from sentinel_bench.forecast_fleet import render_fleet, run_fleet_bench

    if args.nodes < 1 or args.runs < 1:
        raise ValidationError("--nodes and --runs must be >= 1")
    result = run_fleet_bench(args.nodes, args.runs,
                             progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True),
                             with_jobs=args.job_table)
    print(json.dumps(result, indent=2) if args.json else render_fleet(result))
    return EXIT_OK


def cmd_bench_actuate(args: argparse.Namespace) -> int:
    from sentinel_bench.actuate import render_actuate, run_actuate_bench

    conf = args.slurm_conf or os.environ.get("SLURM_CONF", "")
    if not conf:
        raise ConfigError("bench actuate needs a running Slurm cluster: pass --slurm-conf FILE or set SLURM_CONF "
                          "(a test cluster: `bash tests/services.sh start slurm; eval \"$(bash tests/services.sh "
                          "env slurm)\"`)")
    for name in ("drains", "checkpoints", "requeues"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name}: must be >= 1, got {getattr(args, name)}")
    result = run_actuate_bench(conf, args.drains, args.checkpoints, args.requeues, args.workdir,
                               progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True))
    print(json.dumps(result, indent=2) if args.json else render_actuate(result))
    return EXIT_OK if result["meets_goal"] else EXIT_EXPECTATION
