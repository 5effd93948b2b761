"""Verbs that read or change the store and the config: config check, db, nodes, incidents, status, breaker."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

from sentinel import config as config_mod
from sentinel.cli.verbs import EXIT_ERROR, EXIT_OK, load_config, open_repo, out
from sentinel.clock import SystemClock
from sentinel.config.urls import redact_url
from sentinel.errors import StoreError, ValidationError
from sentinel.events import NODE_NAME_PATTERN
from sentinel.tables import fmt_ts, parse_duration, render


def cmd_config_check(args: argparse.Namespace) -> int:
    from sentinel.daemon import validate

    cfg = config_mod.load(args.file, os.environ)
    validate(cfg)
    data = config_mod.to_toml_dict(cfg)
    data["store"]["url"] = redact_url(data["store"]["url"])  # printed: never a password or a secret parameter
    client = data["transport"]["kafka"].get("client", {})
    for key in [k for k in client if "password" in k or "secret" in k]:
        client[key] = "***"
    if args.output == "json":
        print(json.dumps(data, indent=2))
    else:
        print(f"# {args.file}: valid. Normalised configuration with defaults:")
        print(_toml(data))
    return EXIT_OK


def _toml(data: dict[str, Any], prefix: str = "") -> str:
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    lines = [f"[{prefix}]"] if prefix and scalars else []
    lines += [f"{k} = {json.dumps(v)}" for k, v in scalars.items()]
    for key, value in tables.items():
        lines.append("")
        lines.append(_toml(value, f"{prefix}.{key}" if prefix else key))
    return "\n".join(lines).strip("\n")


def cmd_db_prune(args: argparse.Namespace) -> int:
    """Apply store.retention now (the controller does it every store.retention.interval_s)."""
    from sentinel.clock import SystemClock
    from sentinel.controller.housekeeping import prune_store

    config = load_config(args)
    counts = prune_store(open_repo(args), config.store.retention, SystemClock(), None)
    rows = [{"table": t, "rows": n} for t, n in sorted(counts.items())]
    out(args, counts, render(rows, [("table", "table"), ("rows", "rows deleted")]) if rows else
        "nothing older than store.retention keeps")
    return EXIT_OK


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from sqlalchemy.engine import make_url

    from sentinel.store import engine as store_engine

    cfg = load_config(args)
    url = make_url(cfg.store.url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        folder = Path(url.database).parent
        if not folder.is_dir():  # a mistyped path must not grow a folder tree
            raise StoreError(f"no folder {folder} for the store {url.database}; create it first")
    engine = store_engine.make_engine(cfg.store.url)
    store_engine.upgrade(engine)
    print(
        f"store {redact_url(engine.url.render_as_string(hide_password=True))} is at revision "
        f"{store_engine.current_revision(engine)} (head)"
    )
    return EXIT_OK


def cmd_db_current(args: argparse.Namespace) -> int:
    from sentinel.store import engine as store_engine

    cfg = load_config(args)
    engine = store_engine.make_engine(cfg.store.url)
    current, head = store_engine.current_revision(engine), store_engine.head_revision()
    data = {
        "url": redact_url(engine.url.render_as_string(hide_password=True)),
        "current": current,
        "head": head,
        "up_to_date": current == head,
    }
    out(args, data, f"current: {current or 'none (run `sentinel db upgrade`)'}\nhead:    {head}")
    return EXIT_OK if current == head else EXIT_ERROR


def cmd_nodes(args: argparse.Namespace) -> int:
    repo, lemon = open_repo(args), load_config(args).policy.lemon
    rows = repo.nodes()
    recent = repo.incident_counts(SystemClock().now() - lemon.window_s)
    for row in rows:
        row["state"] = "drained" if row["drained_incident_id"] else ("at risk" if row["open_incidents"] else "ok")
        row["last_seen"] = fmt_ts(row["last_seen_ts"])
        row["recent_incidents"] = recent.get(row["name"], 0)
        row["lemon"] = row["recent_incidents"] >= lemon.min_incidents
    columns = [
        ("name", "node"),
        ("state", "state"),
        ("lemon", "lemon"),
        ("recent_incidents", f"incidents ({lemon.window_s / 86_400:g} d)"),
        ("gpu_count", "gpus"),
        ("open_incidents", "open incidents"),
        ("drained_incident_id", "drained by"),
        ("last_seen", "last seen (UTC)"),
    ]
    out(args, rows, render(rows, columns) if rows else "no nodes recorded yet")
    return EXIT_OK


def cmd_incidents(args: argparse.Namespace) -> int:
    if args.node and not re.match(NODE_NAME_PATTERN, args.node):
        raise ValidationError(f"--node: not a valid node name: {args.node!r}")
    since_ts = SystemClock().now() - parse_duration(args.since) if args.since else None
    rows = open_repo(args).incidents(node=args.node, since_ts=since_ts, limit=args.limit,
                                     alerts_only=not args.all)
    for row in rows:
        row["opened"] = fmt_ts(row["opened_ts"])
        row["alert"] = ("held" if row["alert_held"] else "yes") if row["alert_ts"] is not None else "-"
    columns = [
        ("id", "incident"),
        ("node", "node"),
        ("status", "status"),
        ("severity", "severity"),
        ("kind", "kind"),
        ("findings", "findings"),
        ("alert", "alert"),
        ("decision", "action"),
        ("opened", "opened (UTC)"),
        ("summary", "summary"),
    ]
    empty = "no incidents" if args.all else "no alerts (`sentinel incidents --all` also lists evidence-only incidents)"
    out(args, rows, render(rows, columns, max_width=70) if rows else empty)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    repo = open_repo(args)
    counts = repo.counts()
    breaker = repo.load_breaker()
    cfg = load_config(args)
    from sentinel.cli.verbs.models import model_in_use

    model = model_in_use(args)
    data = {
        "store": redact_url(repo.engine.url.render_as_string(hide_password=True)),
        "policy_mode": cfg.policy.mode,
        "actuator": cfg.actuator.kind,
        "hazard_model": model["model"],
        "hazard_model_verified": model["verified"],
        "breaker_open": bool(breaker and breaker.is_open),
        "breaker_reason": breaker.reason if breaker else "",
        **counts,
        "open_alerts": len(repo.open_alerts()),
    }
    lines = [f"{k.replace('_', ' '):<22} {v}" for k, v in data.items()]
    out(args, data, "\n".join(lines))
    return EXIT_OK


def cmd_breaker(args: argparse.Namespace) -> int:
    from sentinel.policy.breaker import CLOSED, reset

    repo = open_repo(args)
    if args.action == "reset":
        from sentinel.cli.identity import operator_identity

        by = operator_identity()
        state = repo.update_breaker(lambda _: (reset(SystemClock().now(), by),) * 2)
    else:
        state = repo.load_breaker() or CLOSED
    data = {
        "open": state.is_open,
        "reason": state.reason,
        "changed": fmt_ts(state.changed_ts or None),
        "nodes_in_window": len({n for _, n in state.recent}),
    }
    verb = "reset: breaker closed" if args.action == "reset" else ("OPEN" if state.is_open else "closed")
    out(args, data, f"breaker {verb}" + (f" ({state.reason})" if state.reason else ""))
    return EXIT_OK


