"""``sentinel-bench soak --gpus 10000 --duration 1h``: the detector and the controller as shipped, for a long run.

A simulated fleet (``gpus / 8`` nodes, one sample per node per ``--interval`` seconds, in real time, each the
agent's whole sample: NVLinks, counter deltas, NICs, host) is produced to a tansu broker of its own; realistic
background (per-GPU temperature and power offsets, noise, clock dips, sparse correctable-error and PCIe-replay
counts) and, evenly spread after a warm-up, fatal faults: a node's GPU falls off the bus (an Xid 79 line on the
log topic, then the GPU reported lost). ``sentinel detector`` and ``sentinel
controller`` run as processes on a fresh store (PostgreSQL with ``--store``, else SQLite). Every 10 s: the RSS
of each process, the detector's consumer lag, the store's size. At the end: samples produced vs processed
(``samples_lost``), dead letters, and every injected fault vs the fatal findings stored for it.

RSS growth is measured from the tenth minute (or a sixth of a shorter run) to the end, each end the median of a
minute of samples; ``lag_trend_per_min`` is the Theil-Sen slope (the median of the slopes between every pair of
samples) of the lag after the same point. The lag comes in bursts (a poll's work, a model refit) that fall back
to zero; a least-squares slope let one burst at the last sample decide the trend (+154 messages/min on a
15-minute run whose lag went back to zero after every burst), the median slope only moves when most of the run
moves. Real time only: the broker takes the fleet's rate as it
comes (no acceleration), so an hour of fleet is an hour of bench.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from sqlalchemy import select, text

from sentinel import codec
from sentinel.events import GpuState, LogEvent, LogKind, Severity
from sentinel.store import schema as s
from sentinel.store.engine import make_engine
from sentinel.tables import render
from sentinel.transport import LOGS, TELEMETRY
from sentinel_bench.brokers import Tansu, free_port
from sentinel_bench.codec import sample_message
from sentinel_bench.stores import fresh_store

Progress = Callable[[str], None]
PROCESSES = ("detector", "controller")
FLEET_BATCH_BYTES = 1 << 20


class Fleet(threading.Thread):
    """Every node's sample each ``interval_s``, and the planned faults (node -> seconds after start)."""

    def __init__(self, bootstrap: str, nodes: int, interval_s: float, faults: dict[str, float], seed: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.interval_s, self.faults = bootstrap, interval_s, faults
        self.names = [f"soak-{i:05d}" for i in range(nodes)]
        self.rng = np.random.default_rng(seed)
        self.temp0 = 55.0 + self.rng.normal(0, 3, (nodes, 8))  # airflow and silicon: each GPU its own level
        self.power0 = 600.0 + self.rng.normal(0, 25, (nodes, 8))
        self.ecc = np.zeros((nodes, 8), dtype=np.int64)
        self.replay = np.zeros((nodes, 8), dtype=np.int64)
        self.stop = threading.Event()
        self.produced = 0
        self.injected: dict[str, float] = {}  # node -> epoch seconds of its fault
        self.errors = 0
        # Each node's sample is the agent's (benchmarks.codec.sample_message: NVLinks, counter deltas, an
        # InfiniBand port per GPU, Ethernet, host), with this fleet's readings in it.
        self.template = sample_message()

    def run(self) -> None:
        from sentinel.transport.kafka import KafkaTransport

        # One producer stands in for every agent: with kafka-python's 16 KiB batches it wrote ~600 record batches
        # a second, and tansu's memory storage, which keeps every batch, spent more CPU on each fetch as they
        # piled up. Up to FLEET_BATCH_BYTES per batch keeps the test broker out of what the soak measures.
        transport = KafkaTransport(self.bootstrap, send_timeout_s=10.0, client={"batch_size": FLEET_BATCH_BYTES})
        started = time.time()
        tick = 0
        while not self.stop.is_set():
            now = time.time()
            self._inject(now - started, now)
            batch = self._samples(now, tick)
            try:
                transport.publish_batch(batch)
                self.produced += sum(1 for topic, _, _ in batch if topic == TELEMETRY)
            except Exception:  # counted: the samples in it are lost, and samples_lost shows it
                self.errors += 1
            tick += 1
            self.stop.wait(max(0.0, started + tick * self.interval_s - time.time()))
        transport.close()

    def _inject(self, elapsed: float, now: float) -> None:
        for node, at in self.faults.items():
            if node not in self.injected and elapsed >= at:
                self.injected[node] = now

    def _samples(self, now: float, tick: int) -> list[tuple[str, str, bytes]]:
        n = len(self.names)
        temp = self.temp0 + self.rng.normal(0, 0.7, (n, 8))
        power = self.power0 + self.rng.normal(0, 15, (n, 8))
        clock = np.where(self.rng.random((n, 8)) < 0.002, 1400.0, 1980.0)  # rare clock dips (power capping)
        self.ecc += self.rng.random((n, 8)) < 1e-4
        self.replay += self.rng.random((n, 8)) < 2e-4
        out: list[tuple[str, str, bytes]] = []
        template = self.template
        for i, node in enumerate(self.names):
            lost = node in self.injected
            gpus = [msgspec.structs.replace(
                reading, state=GpuState.LOST if lost and g == 0 else GpuState.OK,
                temp_c=None if lost and g == 0 else round(float(temp[i, g]), 1), power_w=round(float(power[i, g]), 1),
                sm_clock_mhz=float(clock[i, g]), ecc_sbe_volatile=int(self.ecc[i, g]),
                pcie_replay=int(self.replay[i, g])) for g, reading in enumerate(template.gpus)]
            sample = msgspec.structs.replace(template, node=node, ts=now, seq=tick + 1, gpus=gpus)
            out.append((TELEMETRY, node, codec.encode(sample)))
            if lost and abs(self.injected[node] - now) < 1e-9:
                event = LogEvent(node=node, ts=now, kind=LogKind.XID, xid=79, pci_bus_id="0000:18:00",
                                 message="NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', GPU has fallen off the bus.")
                out.append((LOGS, node, codec.encode(event)))
        return out


def _rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) the process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _metric(port: int, name: str) -> float | None:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
              if line.startswith(name) and (len(line) == len(name) or line[len(name)] in " {")]
    return sum(values) if values else 0.0


def _store_bytes(url: str) -> int:
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    engine = make_engine(url)
    with engine.connect() as conn:
        size = conn.execute(text("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN "
                                 "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
                                 "AND c.relkind = 'r'")).scalar_one()
    engine.dispose()
    return int(size)


def _config(path: Path, bootstrap: str, url: str, port: int, name: str, key: Path) -> None:
    path.write_text("\n".join([
        "[agent]", f'node = "{name}"', "[transport]", 'kind = "kafka"', "[transport.kafka]",
        f'bootstrap = "{bootstrap}"', "[transport.kafka.partitions]", "telemetry = 4", "logs = 2",
        "[store]", f'url = "{url}"', "[metrics]", f'listen = "127.0.0.1:{port}"', "[security]", f'key_file = "{key}"',
        "[detector.host_anomaly]", f'state_dir = "{path.parent / "host"}"',  # in the run's folder, not the cwd
    ]) + "\n")
    path.chmod(0o600)  # it may hold the store's password: a config others can read is refused


def trend_per_min(points: list[tuple[float, float]]) -> float:
    """Theil-Sen slope per minute: the median of the slopes between every pair of points (robust to bursts)."""
    if len(points) < 3:
        return 0.0
    t, y = np.array([p[0] for p in points]) / 60.0, np.array([p[1] for p in points], dtype=float)
    i, j = np.triu_indices(len(t), k=1)
    apart = t[j] != t[i]
    return float(np.median((y[j] - y[i])[apart] / (t[j] - t[i])[apart])) if apart.any() else 0.0


def growth(series: list[tuple[float, float]], since_s: float, span_s: float = 60.0) -> float | None:
    """Relative growth from the first minute after ``since_s`` to the last minute (medians of each)."""
    after = [(t, v) for t, v in series if t >= since_s]
    if not after:
        return None
    first = [v for t, v in after if t < after[0][0] + span_s]
    last = [v for t, v in after if t > after[-1][0] - span_s]
    start = float(np.median(first))
    return (float(np.median(last)) - start) / start if start else None


def run_soak(gpus: int = 10_000, duration_s: float = 3600.0, interval_s: float = 1.0, store_url: str | None = None,
             faults: int | None = None, seed: int = 1, progress: Progress | None = None) -> dict[str, Any]:
    say = progress or (lambda text_: None)
    nodes = max(1, gpus // 8)
    count = faults if faults is not None else max(3, int(duration_s // 300))
    warmup = min(120.0, duration_s / 5)
    faults_at = {f"soak-{(i * 7919) % nodes:05d}": warmup + i * (duration_s - warmup - 30) / max(count, 1)
                 for i in range(min(count, nodes))}
    ref_s = min(600.0, duration_s / 6)
    with tempfile.TemporaryDirectory(prefix="sentinel-soak-") as tmp:
        work = Path(tmp)
        broker = Tansu(work)
        broker.start()
        url, drop = fresh_store(store_url or f"sqlite:///{work / 'soak.db'}", work, "sentinel_soak")
        key = work / "command.key"
        key.write_text(os.urandom(32).hex() + "\n")
        key.chmod(0o600)
        ports = {name: free_port() for name in PROCESSES}
        procs: dict[str, subprocess.Popen[bytes]] = {}
        fleet = Fleet(broker.bootstrap, nodes, interval_s, faults_at, seed)
        samples: list[dict[str, Any]] = []
        try:
            for name in PROCESSES:
                _config(work / f"{name}.toml", broker.bootstrap, url, ports[name], name, key)
                log = open(work / f"{name}.log", "wb")  # noqa: SIM115 - owned by the process
                procs[name] = subprocess.Popen([sys.executable, "-m", "sentinel.cli", name, "--config",
                                                str(work / f"{name}.toml")], stdout=log, stderr=subprocess.STDOUT)
            time.sleep(5)  # the detector joins its group before the fleet starts
            say(f"{nodes} nodes ({nodes * 8} GPUs) every {interval_s:g} s for {duration_s:.0f} s, {len(faults_at)} "
                f"fatal faults; store {url.split('@')[-1]}")
            started = time.monotonic()
            fleet.start()
            pids = {"bench": os.getpid(), "broker": broker.proc.pid if broker.proc else 0,
                    **{n: p.pid for n, p in procs.items()}}
            while (elapsed := time.monotonic() - started) < duration_s:
                dead = [n for n, p in procs.items() if p.poll() is not None]
                if dead:
                    raise RuntimeError(f"{', '.join(dead)} exited during the soak (logs in {work})")
                samples.append({"t": elapsed, "lag": _metric(ports["detector"], "sentinel_consumer_lag_messages"),
                                "rss": {n: _rss(p) for n, p in pids.items()},
                                "cpu": {n: _cpu_s(p) for n, p in pids.items()}, "store": _store_bytes(url)})
                if len(samples) % 6 == 0:
                    say(f"{elapsed / 60:5.1f} min: lag {samples[-1]['lag']}, detector RSS "
                        f"{(samples[-1]['rss']['detector'] or 0) / 2**20:.0f} MiB, store "
                        f"{samples[-1]['store'] / 2**20:.1f} MiB, produced {fleet.produced}")
                time.sleep(min(10.0, max(0.0, duration_s - elapsed)))
            fleet.stop.set()
            fleet.join(60)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and (_metric(ports["detector"], "sentinel_samples_total") or 0) < \
                    fleet.produced:
                time.sleep(1.0)
            time.sleep(5)  # the controller stores the last findings
            consumed = int(_metric(ports["detector"], "sentinel_samples_total") or 0)
            dead_letters = int(_metric(ports["detector"], "sentinel_dead_letters_total") or 0)
            found = _found(url, fleet.injected)
            store_bytes = _store_bytes(url)
        finally:
            fleet.stop.set()
            for proc in procs.values():
                proc.terminate()
            for proc in procs.values():
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            broker.stop()
            drop()
    grown = {}
    for name in ("detector", "controller", "broker", "bench"):
        moved = growth([(x["t"], x["rss"][name]) for x in samples if x["rss"].get(name)], ref_s)
        if moved is not None:
            grown[name] = round(moved, 4)
    lags = [(x["t"], x["lag"]) for x in samples if x["lag"] is not None]
    late = [x for x in samples if x["t"] >= ref_s]
    # each process's share of one core after the reference point: who was busy when the lag moved
    cpu = {n: round(100 * (late[-1]["cpu"][n] - late[0]["cpu"][n]) / (late[-1]["t"] - late[0]["t"]), 1)
           for n in pids if len(late) > 1 and late[-1]["t"] > late[0]["t"]
           and None not in (late[0]["cpu"].get(n), late[-1]["cpu"].get(n))}
    return {
        "gpus": nodes * 8, "nodes": nodes, "duration_s": duration_s, "interval_s": interval_s,
        "store": "postgresql" if url.startswith("postgresql") else "sqlite",
        "samples_produced": fleet.produced, "samples_processed": consumed,
        # what the fleet achieved: below nodes / interval when this machine cannot generate it in real time
        "samples_per_s": round(fleet.produced / duration_s, 1), "samples_per_s_target": round(nodes / interval_s, 1),
        "samples_lost": max(fleet.produced - consumed, 0), "publish_errors": fleet.errors,
        # Sentinel's own processes; the broker keeps every message in memory here, the bench is the fleet
        "rss_growth": grown, "rss_growth_max": max((grown[n] for n in PROCESSES if n in grown), default=None),
        "rss_end_mib": {n: round((samples[-1]["rss"].get(n) or 0) / 2**20, 1) for n in grown} if samples else {},
        "rss_reference_s": ref_s,
        "lag_max": max((v for _, v in lags), default=None),
        "lag_trend_per_min": round(trend_per_min([(t, v) for t, v in lags if t >= ref_s]), 3),
        "lag_p50": _quantile([v for t, v in lags if t >= ref_s], 0.5),
        "lag_p95": _quantile([v for t, v in lags if t >= ref_s], 0.95),
        "cpu_pct": cpu, "dead_letters": dead_letters, "store_bytes": store_bytes,
        "faults_injected": len(fleet.injected), "faults_found": len(found),
        "faults_missed": sorted(set(fleet.injected) - found),
    }


def _quantile(values: list[float], q: float) -> float | None:
    return round(float(np.quantile(values, q)), 1) if values else None


def _found(url: str, injected: dict[str, float]) -> set[str]:
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(s.findings.c.node, s.findings.c.observed_ts)
                            .where(s.findings.c.severity == Severity.FATAL.value)).all()
    engine.dispose()
    return {node for node, ts in rows if node in injected and ts >= injected[node] - 1.0}


def render_soak(r: dict[str, Any]) -> str:
    rows = [{"process": n, "rss": r["rss_end_mib"].get(n), "growth": f"{g:+.1%}"} for n, g in r["rss_growth"].items()]
    return (render(rows, [("process", "process"), ("rss", "RSS at end (MiB)"),
                          ("growth", f"growth since {r['rss_reference_s']:.0f} s")]) +
            f"\n\n{r['gpus']} GPUs ({r['nodes']} nodes) every {r['interval_s']:g} s for {r['duration_s']:.0f} s, "
            f"store {r['store']} ({r['store_bytes'] / 2**20:.1f} MiB at the end)"
            f"\nsamples: {r['samples_produced']} produced ({r['samples_per_s']}/s of {r['samples_per_s_target']}/s "
            f"asked), {r['samples_processed']} processed, "
            f"{r['samples_lost']} lost; dead letters {r['dead_letters']}"
            f"\nconsumer lag: max {r['lag_max']}, median {r['lag_p50']}, p95 {r['lag_p95']}, trend "
            f"{r['lag_trend_per_min']:+.1f} messages/min (Theil-Sen)"
            f"\nCPU (% of one core since {r['rss_reference_s']:.0f} s): "
            + ", ".join(f"{n} {v:.0f}" for n, v in r["cpu_pct"].items()) +
            f"\nfatal faults: {r['faults_found']} of {r['faults_injected']} found"
            + (f" (missed: {', '.join(r['faults_missed'])})" if r["faults_missed"] else ""))
