"""Verbs of the actuation area: ``sentinel resume NODE`` and ``sentinel bench actuate`` (on a running Slurm
cluster)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from sentinel.errors import ConfigError
from sentinel.verbs import EXIT_EXPECTATION, EXIT_OK, load_config, open_repo, out


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


def cmd_resume(args: argparse.Namespace) -> int:
    """Return a node Sentinel drained to service, and close its incident (after the repair)."""
    import time

    import msgspec

    from sentinel.actuator.slurm import SlurmScheduler
    from sentinel.events import IncidentStatus

    config = load_config(args)
    if config.actuator.kind != "slurm":
        raise ConfigError(f"actuator.kind: is {config.actuator.kind!r}; `sentinel resume` returns Slurm nodes to "
                          'service (actuator.kind = "slurm")')
    resumed = SlurmScheduler(config.actuator.slurm).resume(args.node)  # refuses nodes someone else drained
    repo = open_repo(args)
    incident = repo.open_incident(args.node)
    if incident is not None:
        repo.save_incident(msgspec.structs.replace(incident, status=IncidentStatus.RESOLVED, updated_ts=time.time()))
    repo.set_node_drained(args.node, None)
    data = {"node": args.node, "resumed": resumed, "incident_resolved": incident.id if incident else None}
    text = f"{args.node}: " + ("returned to service" if resumed else "was not drained; nothing to resume")
    if incident is not None:
        text += f"; incident {incident.id} resolved"
    out(args, data, text)
    return EXIT_OK
