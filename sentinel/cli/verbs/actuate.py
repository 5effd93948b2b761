"""Verbs of the actuation area: ``sentinel resume NODE``."""

from __future__ import annotations

import argparse

from sentinel.cli.verbs import EXIT_OK, load_config, open_repo, out
from sentinel.clock import SystemClock
from sentinel.errors import ConfigError


def cmd_resume(args: argparse.Namespace) -> int:
    """Return a node Sentinel drained to service, and close its incident (after the repair)."""

    import msgspec

    from sentinel.actuator import Resumable
    from sentinel.daemon import build_scheduler
    from sentinel.events import IncidentStatus

    config = load_config(args)
    scheduler = build_scheduler(config, SystemClock())  # the configured backend: Slurm or Kubernetes
    if not isinstance(scheduler, Resumable):
        raise ConfigError(f"actuator.kind: {config.actuator.kind!r} cannot resume nodes")
    resumed = scheduler.resume(args.node)  # refuses nodes someone else drained
    repo = open_repo(args)
    incident = repo.open_incident(args.node)
    if incident is not None:
        repo.save_incident(msgspec.structs.replace(incident, status=IncidentStatus.RESOLVED,
                                                   updated_ts=SystemClock().now()))
    repo.set_node_drained(args.node, None)
    data = {"node": args.node, "resumed": resumed, "incident_resolved": incident.id if incident else None}
    text = f"{args.node}: " + ("returned to service" if resumed else "was not drained; nothing to resume")
    if incident is not None:
        text += f"; incident {incident.id} resolved"
    out(args, data, text)
    return EXIT_OK
