"""Reading Slurm's JSON (``squeue --json``, ``sinfo --json``) into small typed records, robustly.

Written against Slurm 22.05 (data_parser v0.0.38), tolerant of later shapes: ``job_state`` and node ``state``
may be a string or a list, ``job_id`` a number or a string, allocated nodes a list of records or only a
hostlist string (``gpu-[01-03,07],gpu-10``). Every name that leaves here was checked against the patterns a
scheduler command may carry, so a hostile or broken answer cannot smuggle text into an argv.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from sentinel.errors import ActuatorError
from sentinel.events import NODE_NAME_PATTERN

SLURM_JOB_ID = re.compile(r"^[0-9]{1,12}(?:_[0-9]{1,9})?\Z")  # 1234 or an array task 1234_7
NODE_NAME = re.compile(NODE_NAME_PATTERN)
ON_NODE_STATES = frozenset({"RUNNING", "SUSPENDED", "CONFIGURING", "STOPPED"})
HELD_REASONS = frozenset({"JobHeldAdmin", "JobHeldUser"})


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str  # RUNNING, PENDING, ... (the base state)
    nodes: tuple[str, ...]
    reason: str  # state_reason: None, BeginTime, Resources, JobHeldAdmin, ...
    eligible_ts: float
    priority: int
    restarts: int
    user_id: int | None = None  # whose job: its checkpoint acknowledgement must be that user's file

    @property
    def held(self) -> bool:
        return self.state == "PENDING" and (self.reason in HELD_REASONS or self.priority == 0)


@dataclass(frozen=True)
class SlurmNode:
    name: str
    states: frozenset[str]  # base state and flags, upper case: {"MIXED", "DRAIN"}
    reason: str
    reason_ts: float | None = None  # when the reason was set (sinfo's reason_changed_at), None when unknown

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.states or "DRAINED" in self.states or "DRAINING" in self.states


class SlurmUnreachable(ActuatorError):
    """slurmctld did not answer; the caller retries with backoff."""


def check_node(name: str) -> str:
    if not isinstance(name, str) or not NODE_NAME.match(name):
        raise ActuatorError(f"refusing node name {name!r}: not a valid node name ({NODE_NAME_PATTERN})")
    return name


def check_job(job_id: str) -> str:
    if not isinstance(job_id, str) or not SLURM_JOB_ID.match(job_id):
        raise ActuatorError(f"refusing job id {job_id!r}: not a Slurm job id (1234 or 1234_5)")
    return job_id


MAX_HOSTLIST = 100_000  # names one hostlist may expand to (the largest clusters have tens of thousands)


def expand_hostlist(text: str) -> list[str]:
    """``node[1-3,7],gpu-a`` -> node1, node2, node3, node7, gpu-a (zero padding kept: ``n[01-02]``)."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text.strip()):
        match = re.fullmatch(r"(?P<pre>[^\[]*)\[(?P<ranges>[^\]]*)\](?P<post>.*)", part)
        if match is None:
            names.append(part)
            continue
        for item in match["ranges"].split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ActuatorError(f"cannot read hostlist {text!r}")
            if int(hi or lo) - int(lo) + len(names) > MAX_HOSTLIST:
                raise ActuatorError(f"hostlist {text[:80]!r} names more than {MAX_HOSTLIST:,} nodes")
            for n in range(int(lo), int(hi or lo) + 1):
                names.append(f"{match['pre']}{n:0{len(lo)}d}{match['post']}")
    return names


def _load(stdout: str, what: str, key: str) -> list[Any]:
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise ActuatorError(f"{what}: not JSON ({exc.msg} at {exc.pos})") from None
    except RecursionError:  # nested deeper than the parser's stack: no Slurm answer looks like that
        raise ActuatorError(f"{what}: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise ActuatorError(f"{what}: expected a JSON object")
    errors = data.get("errors") or []
    if errors:  # 22.05 prints its errors here and exits 0 when slurmctld is down
        text = "; ".join(str(e.get("description") or e.get("error") or e) for e in errors if isinstance(e, dict))
        raise SlurmUnreachable(f"{what}: {text or errors}")
    items = data.get(key)
    if not isinstance(items, list):
        raise ActuatorError(f"{what}: no {key!r} list in the answer")
    return items


def _states(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value.upper()]
    if isinstance(value, list):
        return [str(v).upper() for v in value]
    return []


def _number(value: Any) -> float:
    if isinstance(value, dict):  # later versions: {"set": true, "number": 5}
        value = value.get("number", 0) if value.get("set", True) else 0
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return number if math.isfinite(number) else 0.0  # NaN or infinity is no time, count or priority


def parse_jobs(stdout: str) -> list[SlurmJob]:
    jobs = []
    for raw in _load(stdout, "squeue --json", "jobs"):
        if not isinstance(raw, dict) or "job_id" not in raw:
            continue
        job_id = str(raw["job_id"])  # an array task's own raw id: scontrol and scancel accept it as it is
        resources = raw.get("job_resources") or {}
        allocated = resources.get("allocated_nodes") if isinstance(resources, dict) else None
        if isinstance(allocated, list) and allocated:
            nodes = [str(n.get("nodename", "")) for n in allocated if isinstance(n, dict)]
        else:
            nodes = expand_hostlist(str(raw.get("nodes") or "")) if raw.get("nodes") else []
        states = _states(raw.get("job_state"))
        jobs.append(SlurmJob(
            job_id=check_job(job_id),
            state=states[0] if states else "UNKNOWN",
            nodes=tuple(check_node(n) for n in nodes if n),
            reason=str(raw.get("state_reason") or ""),
            eligible_ts=_number(raw.get("eligible_time")),
            priority=int(_number(raw.get("priority"))),
            restarts=int(_number(raw.get("restart_cnt"))),
            user_id=int(raw["user_id"]) if isinstance(raw.get("user_id"), int) else None,
        ))
    return jobs


def parse_nodes(stdout: str) -> list[SlurmNode]:
    nodes = []
    for raw in _load(stdout, "sinfo --json", "nodes"):
        if not isinstance(raw, dict) or "name" not in raw:
            continue
        states = {*_states(raw.get("state")), *_states(raw.get("state_flags"))}
        changed = _number(raw.get("reason_changed_at"))
        nodes.append(SlurmNode(check_node(str(raw["name"])), frozenset(states), str(raw.get("reason") or ""),
                               changed or None))
    return nodes
