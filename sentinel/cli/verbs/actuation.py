"""Verbs around acting on nodes: the operator queue (GPU reset and reboot requests) and command-signing keys."""

from __future__ import annotations

import argparse
import re

from sentinel.cli.identity import operator_identity
from sentinel.cli.verbs import EXIT_OK, open_repo, out
from sentinel.clock import SystemClock
from sentinel.errors import ValidationError
from sentinel.events import NODE_NAME_PATTERN
from sentinel.tables import fmt_ts, render


def cmd_requests(args: argparse.Namespace) -> int:
    """GPU resets and reboots the policy asks a person to carry out; Sentinel never does them itself. Open ones
    by default; ``requests ack ID`` marks one done."""
    repo = open_repo(args)
    if args.action == "ack":
        if not args.id:
            raise ValidationError("requests ack: name the request id (the `id` column of `sentinel requests`)")
        by = operator_identity()  # the kernel's word for who runs this, not $USER
        if not repo.ack_request(args.id, by, SystemClock().now()):
            raise ValidationError(f"no open request {args.id!r} (`sentinel requests --all` lists every one)")
        out(args, {"id": args.id, "acked_by": by}, f"{args.id}: acknowledged by {by}")
        return EXIT_OK
    rows = repo.operator_queue(limit=args.limit, include_acked=args.all)
    for row in rows:
        row["requested"] = fmt_ts(row["ts"])
        row["done"] = f"{fmt_ts(row['acked_ts'])} by {row['acked_by']}" if row["acked_ts"] else "open"
    columns = [("requested", "requested (UTC)"), ("id", "id"), ("node", "node"), ("action", "request"),
               ("done", "done"), ("reason", "why")]
    empty = "no open requests" if not args.all else "operator queue is empty"
    out(args, rows, render(rows, columns, max_width=70) if rows else empty)
    return EXIT_OK


def cmd_keygen(args: argparse.Namespace) -> int:
    """Write a new key (mode 0600): the service key (security.key_file), a fleet key (security.fleet_key_file),
    or with ``--node NAME --fleet-key FILE`` that node's telemetry key (agent.node_key_file). ``-`` prints it."""
    import secrets
    import sys

    from sentinel.actuator.signing import load_key, write_key
    from sentinel.transport.node_auth import node_secret

    if bool(args.node) != bool(args.fleet_key):
        raise ValidationError("keygen: --node and --fleet-key go together (a node's key is derived from the fleet key)")
    text = None
    if args.node:
        if not re.match(NODE_NAME_PATTERN, args.node):
            raise ValidationError(f"keygen: --node {args.node!r} is not a valid node name")
        text = node_secret(load_key(args.fleet_key, "--fleet-key").secret, args.node).decode()
    if args.file == "-":  # for a secret store or a pipe: nothing is written to disk
        sys.stdout.write((text or secrets.token_hex(32)) + "\n")
        return EXIT_OK
    key = write_key(args.file, text)
    data = {"file": args.file, "key_id": key.key_id, "mode": "0600", "node": args.node or None}
    where = (f"set agent.node_key_file to it on {args.node} (docs/security.md)" if args.node else
             "set security.key_file (or security.fleet_key_file) to it on every host that needs it (docs/security.md)")
    out(args, data, f"wrote {args.file} (mode 0600, key id {key.key_id}); {where}")
    return EXIT_OK
