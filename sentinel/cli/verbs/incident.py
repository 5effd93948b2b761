"""``sentinel incident show ID``: one incident in full — findings with evidence, decisions with the guards that
held them back, commands, and each action step with its timing and the scheduler's answer."""

from __future__ import annotations

import argparse
import json

from sentinel.cli.verbs import EXIT_OK, open_repo, out
from sentinel.errors import ValidationError
from sentinel.tables import fmt_ts, render


def cmd_incident_show(args: argparse.Namespace) -> int:
    from sentinel.store.detail import incident_detail

    detail = incident_detail(open_repo(args).engine, args.id)
    if detail is None:
        raise ValidationError(f"no incident {args.id!r} (`sentinel incidents` lists them)")
    out(args, detail, render_detail(detail))
    return EXIT_OK


def render_detail(d: dict) -> str:  # type: ignore[type-arg]
    head = (f"incident {d['id']} on {d['node']}: {d['status']}, {d['severity']} {d['kind']}\n"
            f"opened {fmt_ts(d['opened_ts'])} UTC, updated {fmt_ts(d['updated_ts'])} UTC\n{d['summary']}")
    for f in d["findings"]:
        f["when"] = fmt_ts(f["ts"])
        f["evidence_text"] = json.dumps(f["evidence"], sort_keys=True, default=str)
    for x in d["decisions"]:
        x["when"] = fmt_ts(x["ts"])
        x["held_by"] = ", ".join(x["blocked_by"]) or "-"
    for c in d["commands"]:
        c["when"] = fmt_ts(c["ts"])
        c["sent"] = fmt_ts(c["sent_ts"]) if c["sent_ts"] else "not yet"
    for st in d["steps"]:
        st["after"] = f"+{st['after_s']:.1f} s"
        st["jobs"] = ", ".join(st["job_ids"]) or "-"
    parts = [head]
    parts.append(_section("findings", d["findings"], [("when", "time (UTC)"), ("rule", "rule"),
                                                      ("severity", "severity"), ("confidence", "confidence"),
                                                      ("summary", "summary"), ("evidence_text", "evidence")]))
    parts.append(_section("decisions", d["decisions"], [("when", "time (UTC)"), ("action", "action"),
                                                        ("mode", "mode"), ("held_by", "held back by"),
                                                        ("reason", "reason")]))
    parts.append(_section("commands", d["commands"], [("when", "decided (UTC)"), ("id", "command"),
                                                      ("action", "action"), ("status", "status"),
                                                      ("sent", "last sent (UTC)")]))
    parts.append(_section("action steps", d["steps"], [("after", "after"), ("step", "step"), ("status", "status"),
                                                       ("jobs", "jobs"), ("detail", "scheduler said")]))
    return "\n\n".join(parts)


def _section(title: str, rows: list[dict], columns: list[tuple[str, str]]) -> str:  # type: ignore[type-arg]
    return f"{title}:\n" + (render(rows, columns, max_width=90) if rows else "  (none)")
