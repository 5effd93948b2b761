"""``sentinel-bench chaos``: effects exactly once while processes die, the broker restarts and slurmctld goes away.

Real parts only: a tansu broker on S3 storage (a local moto server, so topics and offsets survive its restarts),
a fresh PostgreSQL database (or SQLite file), the Slurm test cluster tests/slurm.sh started (one job pinned to
each node), one detector process and two controller processes (each with its actuator) started exactly as
systemd starts them. A feeder publishes the fleet's telemetry every second and the planned Xid 79 faults; the
plan (benchmarks.chaos_plan) kill -9s processes and restarts the broker and slurmctld throughout. Then the
run settles and the scheduler's own record is compared with the ground truth.

Only for a cluster started by tests/slurm.sh: the bench cancels every job in its ``batch`` partition and resumes
the nodes it drained.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, text

from sentinel import codec
from sentinel.errors import ConfigError, TransportError
from sentinel.events import GpuReading, LogEvent, LogKind, TelemetrySample
from sentinel.tables import render
from sentinel.transport import LOGS, TELEMETRY
from sentinel_bench.brokers import MotoS3, Tansu
from sentinel_bench.chaos_plan import PROCESSES, Event, make_plan, score
from sentinel_bench.stores import fresh_store

HARNESS = Path(__file__).resolve().parents[2] / "tests" / "slurm.sh"
DRAIN_LOGGED = re.compile(r"update_node: node (\S+) reason set to: (sentinel:.*)")
Progress = Callable[[str], None]


class Cluster:
    """The Slurm test cluster in ``directory`` (tests/slurm.sh): its commands, its log, its slurmctld."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.conf = directory / "slurm.conf"
        if not self.conf.exists() or not HARNESS.exists():
            raise ConfigError(f"{directory}: not a Slurm test cluster started by tests/slurm.sh (run from a source "
                              "checkout: `SENTINEL_SLURM_NODES=12 bash tests/slurm.sh start DIR`)")
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> str:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, check=check,
                              timeout=60).stdout

    def nodes(self) -> list[str]:
        return sorted((n["name"] for n in json.loads(self.run("sinfo", "--json"))["nodes"]),
                      key=lambda n: (len(n), n))

    def jobs(self) -> list[dict[str, Any]]:
        return list(json.loads(self.run("squeue", "--json"))["jobs"])

    def drained(self) -> set[str]:
        return {n["name"] for n in json.loads(self.run("sinfo", "--json"))["nodes"]
                if "DRAIN" in n.get("state_flags", []) and str(n.get("reason", "")).startswith("sentinel:")}

    def ctld(self, action: str) -> None:
        subprocess.run(["bash", str(HARNESS), f"{action}-ctld", str(self.dir)], check=True, timeout=120,
                       capture_output=True)

    def log_size(self) -> int:
        return (self.dir / "slurmctld.log").stat().st_size

    def logged_drains(self, offset: int) -> dict[str, int]:
        with open(self.dir / "slurmctld.log", "rb") as handle:
            handle.seek(offset)
            lines = handle.read().decode(errors="replace").splitlines()
        return dict(Counter(m.group(1) for line in lines if (m := DRAIN_LOGGED.search(line))))

    def reset(self) -> None:
        self.run("scancel", "--quiet", "--partition=batch", check=False)
        for node in self.drained():
            self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)


class Services:
    """The detector and the two controllers as separate processes, each killable and restartable."""

    def __init__(self, configs: dict[str, Path], logs: Path) -> None:
        self.configs = configs
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.kills = 0
        self.killed: Counter[str] = Counter()

    def start(self, name: str) -> None:
        verb = "detector" if name == "detector" else "controller"
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
        self.procs[name] = subprocess.Popen([sys.executable, "-m", "sentinel.cli", verb, "--config",
                                             str(self.configs[name])], stdout=log, stderr=subprocess.STDOUT)

    def kill(self, name: str) -> str | None:
        """kill -9 ``name``, or another running service when it is down already; return which one (None: all
        are down)."""
        running = [n for n, p in self.procs.items() if p.poll() is None]
        target = name if name in running else (running[0] if running else None)
        if target is not None:
            self.procs[target].send_signal(signal.SIGKILL)
            self.procs[target].wait(10)
            self.kills += 1
            self.killed[target] += 1
        return target

    def ensure_running(self) -> None:
        for name in self.configs:
            if name not in self.procs or self.procs[name].poll() is not None:
                self.start(name)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


class Feeder(threading.Thread):
    """The fleet: every node's telemetry each second and the planned faults, kept and re-sent while the broker is
    away (as the agent's spool does)."""

    def __init__(self, bootstrap: str, nodes: list[str], faults: dict[str, float], started: float) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.nodes, self.faults, self.started = bootstrap, nodes, faults, started
        self.stop = threading.Event()
        self.failures = 0
        self.sent_faults: set[str] = set()

    def run(self) -> None:
        from sentinel.transport.kafka import KafkaTransport

        transport = KafkaTransport(self.bootstrap, send_timeout_s=5.0)
        backlog: list[tuple[str, str, bytes]] = []
        seq = 0
        while not self.stop.wait(1.0):
            now, seq = time.time(), seq + 1
            for node in self.nodes:
                gpus = [GpuReading(index=g, pci_bus_id=f"00000000:{0x18 + g:02X}:00.0", temp_c=55.0 + g)
                        for g in range(8)]
                backlog.append((TELEMETRY, node, codec.encode(TelemetrySample(node=node, ts=now, seq=seq, gpus=gpus))))
            for node, at in self.faults.items():
                if node not in self.sent_faults and now - self.started >= at:
                    self.sent_faults.add(node)
                    event = LogEvent(node=node, ts=now, kind=LogKind.XID, xid=79, pci_bus_id="0000:1b:00",
                                     message="NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', GPU has fallen off "
                                             "the bus.")
                    backlog.append((LOGS, node, codec.encode(event)))
            try:
                transport.publish_batch(backlog[-20_000:])
                backlog = []
            except TransportError:
                self.failures += 1
        transport.close()


def run_chaos(slurm_dir: Path, store_url: str, duration_s: float = 300.0, seed: int = 1, kills: int = 24,
              broker_restarts: int = 3, slurmctld_restarts: int = 2, settle_s: float = 180.0,
              progress: Progress = lambda _: None) -> dict[str, Any]:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # the feeder's client complains through every restart
    cluster = Cluster(slurm_dir)
    nodes = cluster.nodes()
    plan = make_plan(nodes, duration_s, seed, kills, broker_restarts, slurmctld_restarts)
    work = Path(tempfile.mkdtemp(prefix="sentinel-chaos-"))
    progress(f"{len(nodes)} Slurm nodes; {len(plan.isolated)} isolated faults, a storm on {len(plan.storm)}, "
             f"breaker limit {plan.breaker_limit}; logs in {work}")
    cluster.reset()
    s3 = MotoS3(work)
    s3.start()
    broker = Tansu(work, s3)
    broker.start()
    url, drop = fresh_store(store_url, work, "sentinel_chaos")
    services = Services(_write_configs(work, broker.bootstrap, url, cluster.conf), work)
    feeder: Feeder | None = None
    try:
        for node in nodes:
            cluster.run("sbatch", "--parsable", f"--nodelist={node}", "--requeue", f"--job-name=chaos-{node}",
                        "--output=/dev/null", "--wrap", "sleep 100000")
        _wait(lambda: sum(j["job_state"] == "RUNNING" for j in cluster.jobs()) == len(nodes), 60, "jobs running")
        offset = cluster.log_size()
        services.ensure_running()
        started = time.time()
        feeder = Feeder(broker.bootstrap, nodes, {e.target: e.at_s for e in plan.events if e.kind == "fault"},
                        started)
        feeder.start()
        counts = _play(plan.events, started, services, broker, cluster, progress)
        services.ensure_running()
        progress(f"chaos over after {time.time() - started:.0f} s ({services.kills} kills); settling")
        faulted = {*plan.isolated, *plan.storm}
        want = min(len(faulted), plan.breaker_limit)
        reader = create_engine(url)

        def settled() -> bool:
            facts = _store_facts(reader)
            return (len(cluster.drained()) >= want and not facts["commands"].get("pending")
                    and faulted <= facts["found"])

        _wait(settled, settle_s, "drains and findings to settle", every_s=2.0, fail=False)
        time.sleep(10.0)  # a late duplicate would show now
        drains = cluster.logged_drains(offset)
        restarts = {j["name"].removeprefix("chaos-"): int(j.get("restart_cnt", 0)) for j in cluster.jobs()
                    if str(j.get("name", "")).startswith("chaos-")}
        store = _store_facts(reader)
        reader.dispose()
        result = {
            "duration_s": round(time.time() - started, 1), "seed": seed, "nodes": len(nodes),
            "kills": services.kills, "broker_restarts": counts["broker"], "slurmctld_restarts": counts["slurmctld"],
            "publish_failures": feeder.failures,
            **score(plan, drains, restarts, store["found"]),
            "killed": dict(services.killed), **_log_counts(work),
            "commands": store["commands"], "drains_logged": drains, "work_dir": str(work),
        }
        return result
    finally:
        if feeder is not None:
            feeder.stop.set()
            feeder.join(30)
        services.stop()
        broker.stop()
        s3.stop()
        cluster.reset()
        drop()


def _play(events: list[Event], started: float, services: Services, broker: Tansu, cluster: Cluster,
          progress: Progress) -> Counter[str]:
    """Carry out the plan's chaos (faults are the feeder's); what is down comes back after ``down_s``."""
    counts: Counter[str] = Counter()
    pending: list[tuple[float, Callable[[], None]]] = []
    for event in events:
        while True:
            now = time.time() - started
            for due in [p for p in pending if p[0] <= now]:
                pending.remove(due)
                due[1]()
            if now >= event.at_s:
                break
            time.sleep(min(0.2, event.at_s - now))
        target = event.target
        if event.kind == "kill" and event.target in PROCESSES:
            killed = services.kill(event.target)
            target = killed or "(all down)"
            if killed is not None:
                pending.append((event.at_s + event.down_s, _starter(services, killed)))
        elif event.kind == "broker":
            broker.stop()
            pending.append((event.at_s + event.down_s, broker.start))
        elif event.kind == "slurmctld":
            cluster.ctld("stop")
            pending.append((event.at_s + event.down_s, lambda: cluster.ctld("start")))
        if event.kind != "fault":
            counts[event.kind] += 1
            progress(f"t={event.at_s:5.1f} s: {event.kind} {target}".rstrip())
    for at, action in sorted(pending, key=lambda p: p[0]):
        time.sleep(max(0.0, at - (time.time() - started)))
        action()
    return counts


def _starter(services: Services, name: str) -> Callable[[], None]:
    return lambda: services.start(name)


def _write_configs(work: Path, bootstrap: str, url: str, slurm_conf: Path) -> dict[str, Path]:
    key = work / "command.key"
    key.write_text(uuid.uuid4().hex * 2 + "\n")
    key.chmod(0o600)
    (work / "ack").mkdir()
    configs = {}
    for name in PROCESSES:
        path = work / f"{name}.toml"
        path.write_text("\n".join([
            "[agent]", f'node = "{name}"',
            "[transport]", 'kind = "kafka"', "[transport.kafka]", f'bootstrap = "{bootstrap}"',
            "session_timeout_ms = 6000", "heartbeat_interval_ms = 1000", "send_timeout_s = 5.0",
            "[transport.kafka.partitions]", "telemetry = 4", "logs = 4", "findings = 2",
            "[store]", f'url = "{url}"',
            "[policy]", 'mode = "act"', "command_resend_s = 20.0", "[policy.breaker]", "max_fraction = 0.6",
            "[detector]", "replay_messages = 2000", "record_interval_s = 5",
            "[actuator]", 'kind = "slurm"', "[actuator.slurm]", f'slurm_conf = "{slurm_conf}"',
            f'ack_dir = "{work / "ack"}"',
            "[security]", f'key_file = "{key}"',
        ]) + "\n")
        path.chmod(0o600)  # it may hold the store's password: a config others can read is refused
        configs[name] = path
    return configs


def _log_counts(work: Path) -> dict[str, int]:
    """What the services' logs say they did to recover: outbox re-sends and journal resumptions."""
    text_ = "".join((work / f"{name}.log").read_text(errors="replace") for name in PROCESSES
                    if (work / f"{name}.log").exists())
    return {"commands_resent": text_.count(" re-sent: no final result"),
            "commands_resumed": text_.count("resuming command ")}


def _store_facts(engine: Engine) -> dict[str, Any]:
    """Nodes with a stored fatal finding, and commands by status."""
    with engine.connect() as conn:
        found = {r[0] for r in conn.execute(text("SELECT DISTINCT node FROM findings WHERE severity = 'fatal'"))}
        commands = {str(status): int(n) for status, n in
                    conn.execute(text("SELECT status, count(*) FROM commands GROUP BY status")).all()}
    return {"found": found, "commands": commands}


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.5,
          fail: bool = True) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            if fail:
                raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
            return
        time.sleep(every_s)


KEYS = ("kills", "broker_restarts", "slurmctld_restarts", "faults", "drains_expected", "drains_missing",
        "drains_duplicated", "requeues_duplicated", "false_drains", "breaker_limit", "breaker_exceeded",
        "findings_lost")


def render_chaos(result: dict[str, Any]) -> str:
    rows = [{"measure": key.replace("_", " "), "value": result[key], "goal": "0" if key in _GOAL_ZERO else ""}
            for key in KEYS]
    table = render(rows, [("measure", "measure"), ("value", "value"), ("goal", "goal")])
    return (f"chaos: {result['nodes']} nodes, {result['duration_s']:.0f} s, seed {result['seed']}\n{table}\n"
            f"commands by status: {result['commands']}")


_GOAL_ZERO = {"drains_missing", "drains_duplicated", "requeues_duplicated", "false_drains", "breaker_exceeded",
              "findings_lost"}
