"""Verbs for the simulator's scenarios: ``sentinel sim plan``."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from sentinel.cli.verbs import EXIT_OK
from sentinel.tables import render


def cmd_sim_plan(args: argparse.Namespace) -> int:
    from sentinel.sim import groundtruth, scenario

    if args.scenario == "list":
        print("\n".join(scenario.shipped()))
        return EXIT_OK
    sc = scenario.load(args.scenario)
    events = groundtruth.plan(sc)
    if args.csv:
        groundtruth.export_csv(events, Path(args.csv))
    if args.output == "json":
        print(json.dumps({"scenario": sc.name, "node_days": sc.node_days, "events": [asdict(e) for e in events]},
                         indent=2))
        return EXIT_OK
    by_class = Counter((e.kind, e.cls) for e in events)
    rows = [{"kind": kind, "class": cls, "count": n,
             "with_precursor": sum(1 for e in events if e.cls == cls and e.has_precursor)}
            for (kind, cls), n in sorted(by_class.items())]
    print(f"{sc.name}: {sc.nodes} nodes x {sc.gpus_per_node} GPUs, {sc.duration_s / 3600:g} h "
          f"({sc.node_days:g} node-days), seed {sc.seed}: {len(events)} ground-truth events")
    print(render(rows, [("kind", "kind"), ("class", "class"), ("count", "count"),
                        ("with_precursor", "with precursor")]))
    if args.csv:
        print(f"written to {args.csv}")
    return EXIT_OK


def cmd_sim_export(args: argparse.Namespace) -> int:
    import sys

    from sentinel.sim import scenario
    from sentinel.sim.export import export

    sc = scenario.load(args.scenario)

    def progress(fraction: float) -> None:
        print(f"\rexporting {sc.name}: {fraction:4.0%}", end="", file=sys.stderr, flush=True)

    counts = export(sc, Path(args.out), max_steps=args.max_steps, progress=progress)
    print(file=sys.stderr)
    if args.output == "json":
        print(json.dumps({"scenario": sc.name, "out": args.out, **counts}))
    else:
        print(f"{sc.name}: {counts['steps']} steps in {counts['chunks']} chunk(s), {counts['events']} ground-truth "
              f"events, {counts['logs']} log lines -> {args.out}")
    return EXIT_OK
