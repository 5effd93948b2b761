"""Verbs around acting on nodes: the operator queue (GPU reset and reboot requests) and command-signing keys."""

from __future__ import annotations

import argparse

from sentinel.tables import fmt_ts, render
from sentinel.verbs import EXIT_OK, open_repo, out


def cmd_requests(args: argparse.Namespace) -> int:
    """GPU resets and reboots the policy asks a person to carry out; Sentinel never does them itself."""
    rows = open_repo(args).operator_queue(limit=args.limit)
    for row in rows:
        row["requested"] = fmt_ts(row["ts"])
    columns = [("requested", "requested (UTC)"), ("node", "node"), ("action", "request"),
               ("incident_id", "incident"), ("reason", "why")]
    out(args, rows, render(rows, columns, max_width=70) if rows else "operator queue is empty")
    return EXIT_OK


def cmd_keygen(args: argparse.Namespace) -> int:
    """Write a new command-signing key (mode 0600); point security.key_file at it on controller and actuator."""
    from sentinel.actuator.signing import write_key

    key = write_key(args.file)
    data = {"file": args.file, "key_id": key.key_id, "mode": "0600"}
    out(args, data, f"wrote {args.file} (mode 0600, key id {key.key_id}); set security.key_file to it "
                    "on every controller and actuator host (docs/security.md)")
    return EXIT_OK
