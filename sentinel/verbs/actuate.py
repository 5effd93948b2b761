"""Verbs of the actuation area: ``sentinel bench actuate`` (on a running Slurm cluster)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from sentinel.errors import ConfigError
from sentinel.verbs import EXIT_EXPECTATION, EXIT_OK


def cmd_bench_actuate(args: argparse.Namespace) -> int:
    from sentinel.bench.actuate import render_actuate, run_actuate_bench

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
