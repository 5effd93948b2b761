"""``sentinel install``: lay out units, configs and the command key under a prefix (``sentinel/cli/install.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sentinel.cli.verbs import EXIT_OK, out
from sentinel.errors import ValidationError
from sentinel.tables import render


def cmd_install(args: argparse.Namespace) -> int:
    from sentinel.cli.install import Shipped, apply, plan

    prefix = Path(args.prefix)
    if not prefix.is_absolute():
        raise ValidationError(f"--prefix {args.prefix}: give an absolute path")
    shipped = Shipped.find()
    done = apply(plan(prefix, shipped, Path(sys.executable).parent), dry_run=args.dry_run)
    data = {"prefix": str(prefix), "dry_run": args.dry_run, "files": done,
            "not_installed": {"alert_rules": str(shipped.rules), "dashboards": str(shipped.dashboards),
                              "samples": str(shipped.samples)}}
    text = render(done, [("path", "path"), ("mode", "mode"), ("action", "action")], max_width=100)
    text += (f"\nalert rules (with their promtool tests): {shipped.rules}; dashboard: {shipped.dashboards}; "
             f"Alertmanager and Kubernetes samples: {shipped.samples}\n"
             "next: systemctl daemon-reload; enable sentinel-agent on GPU nodes, sentinel-detector and "
             "sentinel-controller on the central server (docs/operations.md)")
    out(args, data, text)
    return EXIT_OK
