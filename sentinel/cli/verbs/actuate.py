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
    from sentinel.cli.identity import operator_identity
    from sentinel.daemon import build_scheduler
    from sentinel.events import ActionKind, Decision, IncidentStatus, Mode

    config = load_config(args)
    scheduler = build_scheduler(config, SystemClock())  # the configured backend: Slurm or Kubernetes
    if not isinstance(scheduler, Resumable):
        raise ConfigError(f"actuator.kind: {config.actuator.kind!r} cannot resume nodes")
    resumed = scheduler.resume(args.node)  # refuses nodes someone else drained
    repo = open_repo(args)
    by, now = operator_identity(), SystemClock().now()
    incident = repo.open_incident(args.node)
    if incident is not None:
        repo.save_incident(msgspec.structs.replace(incident, status=IncidentStatus.RESOLVED, updated_ts=now))
        # who returned the node, in the incident's decisions (`sentinel incidents show`)
        repo.add_decision(Decision(id=f"{incident.id}:resume", incident_id=incident.id, node=args.node, ts=now,
                                   action=ActionKind.NONE, mode=Mode.OBSERVE,
                                   reason=f"resumed by {by}" + ("" if resumed else " (node was not drained)")))
    repo.set_node_drained(args.node, None)
    data = {"node": args.node, "resumed": resumed, "incident_resolved": incident.id if incident else None,
            "by": by}
    text = f"{args.node}: " + ("returned to service" if resumed else "was not drained; nothing to resume")
    if incident is not None:
        text += f"; incident {incident.id} resolved"
    out(args, data, text)
    return EXIT_OK
