"""``sentinel-bench pipeline --broker HOST:PORT``: the detector's throughput against bare Kafka consumption.

In one run, on fresh topics of the given broker:
1. produce N node-messages as the agent sends them (8 GPUs, an InfiniBand port per GPU, Ethernet, host), each
   node running a job of ``pipeline_samples.NODES_PER_JOB`` nodes (the peers peer comparison compares);
2. baseline: a bare kafka-python consumer that only fetches and decodes them (whole records, validated), run
   before and again after step 3 (A-B-A: the host's speed drifts between runs by up to 2x; ``bare_msgs_per_s``
   is the mean of the two, ``bare_runs_msgs_per_s`` both);
3. the detector end to end (fetch, decode, windows, rules, findings, commits) in this process, its windows
   first filled with the minute of samples before the produced ones (``warm_up``: the steady state is timed)
   (``detector_msgs_per_s``; ``ratio`` = detector / bare), and as two group members in two processes
   (``two_process_msgs_per_s``: the group's rate while both members were busy; ``two_process_span_msgs_per_s``
   from the first member's first step to the last member's end, start-up skew and uneven partitions included);
4. live latency: samples produced at a steady rate while the detector runs, some with a GPU that fell off the
   bus; sample-to-finding latency p50/p99 is measured at a findings consumer;
5. detector memory per tracked GPU (tracemalloc over ``nodes`` nodes, 1,000 by default, with full windows,
   scored by the model).

The detector is the one ``sentinel detector`` runs, with its garbage-collector thresholds (``relax_gc``, applied
to the whole bench process, so the bare consumer runs under them too), at product defaults
(``DETECTOR_AS_SHIPPED``): every rule, counter warnings, peer comparison, stragglers, and the hazard model with
a trained model loaded (``--model``, by default the cached model trained on the shipped training scenario); the
JSON's ``features`` says what was on.
``--compression`` picks the producer's compression (the agents' ``transport.kafka.compression``).
``--node-auth on`` (the default) signs every message with its node's key and has the detector verify each one
(``sentinel.transport.node_auth``, issue 38), as a fleet with ``security.fleet_key_file`` runs; the bare consumer
strips the frame unverified.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from sentinel import codec
from sentinel.actuator.sealed import inside
from sentinel.clock import Clock, ManualClock, SystemClock
from sentinel.config import DetectorConfig, from_mapping
from sentinel.detector.hazard_scoring import load_scorer
from sentinel.detector.host_anomaly import HostAnomaly
from sentinel.detector.service import Detector, relax_gc
from sentinel.events import Finding, TelemetrySample
from sentinel.obs.metrics import Metrics
from sentinel.sim.trainset import cached_model
from sentinel.store.engine import make_engine, upgrade
from sentinel.store.repository import Repository
from sentinel.tables import render
from sentinel.transport import FINDINGS, LOGS, TELEMETRY, Transport
from sentinel.transport.kafka import FETCH, KafkaTransport
from sentinel.transport.memory import MemoryTransport
from sentinel.transport.node_auth import NodeVerifier, payload
from sentinel_bench import pipeline_samples as fleet

Progress = Callable[[str], None]
WARM_S = 61  # samples per node in the windows before timing: a full window (60) and one more
def _topics(run: str) -> tuple[str, str, str]:
    return f"bench-{run}.telemetry", f"bench-{run}.logs", f"bench-{run}.findings"


def scratch_store(tmp: str) -> Repository:
    engine = make_engine(f"sqlite:///{tmp}/bench-{uuid.uuid4().hex[:6]}.db")
    upgrade(engine)
    return Repository(engine)


def _config(model: str | None, record_interval_s: float = 30.0) -> DetectorConfig:
    """Product defaults, with the model named (None: rules only, for tests of the bench itself)."""
    return from_mapping({"detector": {"record_interval_s": record_interval_s,
                                      "hazard": {"model": model or ""}}}).detector


def detector_as_shipped(transport: Transport, repo: Repository, model: str | None, clock: Clock, group: str,
                        topics: tuple[str, str, str] = (TELEMETRY, LOGS, FINDINGS), record_interval_s: float = 30.0,
                        node_auth: bool = False) -> Detector:
    config = _config(model, record_interval_s)
    host = msgspec.structs.replace(config.host_anomaly, state_dir="")  # on, as shipped; state not in the cwd
    return Detector(transport, repo, config, Metrics(), clock, group=group, topics=topics,
                    hazard=load_scorer(config.hazard), host=HostAnomaly.from_config(host) if host.enabled else None,
                    nodes=NodeVerifier([fleet.FLEET_SECRET]) if node_auth else None)


def features(model: str | None) -> dict[str, Any]:
    config = _config(model)
    return {"rules": True, "counter_warnings": True, "infiniband_rules": True, "peer_comparison": True,
            "stragglers": True, "hazard_model": Path(model).name if model else None,
            "anomalies": bool(model) and config.hazard.anomalies, "host_anomaly": config.host_anomaly.enabled,
            "window_samples": config.window_samples}


def warm_up(detector: Detector, nodes: int) -> None:
    """Fill every node's window with the ``WARM_S`` samples before the produced ones (sample times just before
    theirs) and score them once, straight into the detector: it is then as a member is after its first
    minutes, and what the bench times is that steady state, not windows filling and the hazard model's first
    scoring of every node on half-full windows (one node at a time), which a member does once."""
    now = time.time()
    for sample in fleet.views(WARM_S * nodes, nodes):
        detector.on_sample(sample, now)
    if detector.hazard is not None:
        detector.hazard.score(detector.windows, list(detector.windows), now)
    detector.samples_seen = detector.gpu_samples_seen = 0


def _detector_rate(broker: str, topics: tuple[str, str, str], n: int, tmp: str, group: str,
                   model: str | None, nodes: int, node_auth: bool) -> tuple[float, int, float]:
    transport = _kafka(broker)
    detector = detector_as_shipped(transport, scratch_store(tmp), model, SystemClock(), group, topics,
                                   node_auth=node_auth)
    warm_up(detector, nodes)
    started = cpu_started = None
    deadline = time.monotonic() + 300
    while detector.samples_seen < n and time.monotonic() < deadline:
        before, cpu_before = time.perf_counter(), time.process_time()  # from the step bringing the first messages
        if detector.step(5000, timeout_s=0.5) and started is None:
            started, cpu_started = before, cpu_before
    elapsed = time.perf_counter() - (started or time.perf_counter())
    cpu = time.process_time() - (cpu_started or time.process_time())
    detector.consumer.close()
    transport.close()
    return detector.samples_seen / max(elapsed, 1e-9), detector.samples_seen, cpu


def _kafka(broker: str, compression: str | None = "zstd") -> KafkaTransport:
    # the producer's compression matters (the agents' default: zstd); consumers read any
    return KafkaTransport(broker, compression=None if compression == "none" else compression,
                          session_timeout_ms=6000, heartbeat_interval_ms=1000)


def worker(broker: str, run: str, group: str, model: str, nodes: int, node_auth: bool = False,
           idle_s: float = 3.0) -> None:
    """One detector group member for the two-process measurement; prints its count and timeline as JSON.

    ``timeline``: (time, messages so far) at the start of the step that brought the first messages and after
    every step that brought any, so the parent can count what both members did while both were busy."""
    relax_gc()
    with tempfile.TemporaryDirectory() as tmp:
        transport = _kafka(broker)
        detector = detector_as_shipped(transport, scratch_store(tmp), model or None, SystemClock(), group, _topics(run),
                                       node_auth=node_auth)
        warm_up(detector, nodes)
        timeline: list[tuple[float, int]] = []
        cpu = [0.0, 0.0]  # process CPU seconds at the first step that brought messages and after the last
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < (idle_s if timeline else 60):
            before, seen, cpu_before = time.time(), detector.samples_seen, time.process_time()
            if detector.step(5000, timeout_s=0.5):
                if not timeline:
                    timeline.append((before, seen))
                    cpu[0] = cpu_before
                timeline.append((time.time(), detector.samples_seen))
                cpu[1] = time.process_time()
                quiet_since = time.monotonic()
        first, last = (timeline[0][0], timeline[-1][0]) if timeline else (None, None)
        print(json.dumps({"count": detector.samples_seen, "first": first, "last": last, "timeline": timeline,
                          "cpu_s": cpu[1] - cpu[0]}), flush=True)
        detector.consumer.close()
        transport.close()


def _count_at(timeline: list[list[float]], t: float) -> float:
    """Messages a member had processed at time ``t``, interpolated between its step boundaries."""
    for (t0, c0), (t1, c1) in zip(timeline, timeline[1:], strict=False):
        if t0 <= t <= t1:
            return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1
    return timeline[-1][1] if t > timeline[-1][0] else timeline[0][1]


def group_rates(results: list[dict[str, Any]]) -> tuple[float, float]:
    """(rate while every member was busy, rate from the first member's first step to the last one's end).

    The first is the group's throughput: it leaves out the members' staggered start (joining the group can hold
    one member back by a second) and the tail when one member has finished its partitions while the other still
    works (node keys hash unevenly over few partitions: 48.5/51.5 % in the default run). The second is kept for
    comparison; on a long run both converge."""
    counted = [r for r in results if r["first"] is not None]
    total = sum(r["count"] for r in counted)
    span = total / max(max(r["last"] for r in counted) - min(r["first"] for r in counted), 1e-9)
    start, end = max(r["first"] for r in counted), min(r["last"] for r in counted)
    if len(counted) < len(results) or end - start <= 0:
        return span, span
    done = sum(_count_at(r["timeline"], end) - _count_at(r["timeline"], start) for r in counted)
    return done / (end - start), span


def _two_process_rate(broker: str, run: str, n: int, model: str | None,
                      nodes: int, node_auth: bool) -> tuple[float, float, int, float]:
    group = f"two-{uuid.uuid4().hex[:6]}"
    procs = [subprocess.Popen([sys.executable, "-m", "sentinel_bench.pipeline", broker, run, group, model or "",
                               str(nodes), "1" if node_auth else "0"],
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    results = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    both, span = group_rates(results)
    return both, span, sum(r["count"] for r in results if r["first"] is not None), sum(r["cpu_s"] for r in results)


def _bare_rate(broker: str, topic: str, n: int) -> tuple[float, float]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=broker, group_id=f"bare-{uuid.uuid4().hex[:6]}",
                             enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
                             heartbeat_interval_ms=1000, api_version=(2, 8, 0), **FETCH)  # as the detector fetches
    count, started, cpu_started = 0, None, None
    deadline = time.monotonic() + 300
    while count < n and time.monotonic() < deadline:
        before, cpu_before = time.perf_counter(), time.process_time()  # as the detector: from the first records
        for records in consumer.poll(timeout_ms=500, max_records=5000).values():
            if started is None:
                started, cpu_started = before, cpu_before
            for record in records:
                codec.decode_as(payload(record.value), TelemetrySample)
                count += 1
    elapsed = time.perf_counter() - (started or time.perf_counter())
    cpu = time.process_time() - (cpu_started or time.process_time())
    consumer.close()
    return count / max(elapsed, 1e-9), cpu


def _latency(broker: str, tmp: str, model: str | None, node_auth: bool, rate: int = 2000,
             seconds: float = 5.0) -> list[float]:
    run = uuid.uuid4().hex[:8]
    topics = _topics(run)
    transport = _kafka(broker)
    transport.ensure_topics({topics[0]: 4, topics[1]: 1, topics[2]: 1})
    detector = detector_as_shipped(transport, scratch_store(tmp), model, SystemClock(), f"lat-{run}", topics,
                                   node_auth=node_auth)
    findings = transport.consumer(f"find-{run}", [topics[2]])
    stop = threading.Event()
    thread = threading.Thread(target=lambda: [detector.step(2000, timeout_s=0.2) for _ in iter(stop.is_set, True)])
    thread.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (detector.consumer.consumer.assignment()  # type: ignore[attr-defined]
                                               and findings.consumer.assignment()):
        findings.poll(10, timeout_s=0.2)  # both consumers must have joined before the clock starts
    latencies: list[float] = []
    producer = _kafka(broker)
    for tick in range(int(seconds * 10)):
        batch = fleet.keyed(rate // 10, 500, fault_every=100, ts=time.time(), tag=str(tick), signed=node_auth)
        producer.publish_batch((topics[0], node, m) for node, m in batch)
        for message in findings.poll(1000):
            latencies.append(time.time() - inside(message.value, Finding).observed_ts)
        time.sleep(0.1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(latencies) < int(seconds * rate / 100):
        for message in findings.poll(1000, timeout_s=0.5):
            latencies.append(time.time() - inside(message.value, Finding).observed_ts)
    stop.set()
    thread.join(10)
    findings.close()
    producer.close()
    transport.close()
    return latencies


def _bytes_per_gpu(model: str | None, node_auth: bool, nodes: int = 1000) -> float:
    """State per GPU once every window is full and the model has scored every node (the steady state)."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = scratch_store(tmp)
        transport = MemoryTransport(10**7)
        samples = _config(model).window_samples + 5
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        detector = detector_as_shipped(transport, repo, model, ManualClock(), "mem", record_interval_s=1e9,
                                       node_auth=node_auth)
        for start in range(0, nodes * samples, 20_000):
            for node, m in fleet.keyed(min(20_000, nodes * samples - start), nodes, first=start, signed=node_auth):
                transport.publish(TELEMETRY, node, m)
            while detector.step(5000):
                pass
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        grown = sum(s.size_diff for s in after.compare_to(before, "filename") if "sentinel" in str(s.traceback)
                    or "numpy" in str(s.traceback) or "msgspec" in str(s.traceback))
        del detector
    return grown / (nodes * 8)


def run_pipeline_bench(broker: str, messages: int = 100_000, nodes: int = 1000, progress: Progress | None = None,
                       model: str | None = None, compression: str = "zstd", node_auth: bool = True) -> dict[str, Any]:
    """``model``: a model directory, or None for the cached model trained on the shipped scenario (trained on
    first use); "none" runs the rules alone."""
    say = progress or (lambda text: None)
    relax_gc()  # as `sentinel detector` runs; the bare consumer, measured in this process too, gets it as well
    if model is None:
        model = cached_model(say)
    elif model == "none":
        model = None
    run = uuid.uuid4().hex[:8]
    topics = _topics(run)
    producer = _kafka(broker, compression)
    producer.ensure_topics({topics[0]: 4, topics[1]: 1, topics[2]: 1})
    say(f"producing {messages} node-messages to {topics[0]} (4 partitions)")
    # after the samples that warm the windows up; keyed by node name, signed with each node's key (node_auth)
    produced = fleet.keyed(messages, nodes, first=WARM_S * nodes, signed=node_auth)
    started = time.perf_counter()
    for i in range(0, len(produced), 2000):
        producer.publish_batch((topics[0], node, m) for node, m in produced[i:i + 2000])
    produce_rate = messages / (time.perf_counter() - started)
    producer.close()
    with tempfile.TemporaryDirectory() as tmp:
        say("bare kafka-python consume + decode")
        bare_before, cpu_before = _bare_rate(broker, topics[0], messages)
        say("detector, one process")
        detector, seen, cpu_one = _detector_rate(broker, topics, messages, tmp, f"one-{run}", model, nodes,
                                                 node_auth)
        say("bare kafka-python consume + decode, again")
        bare_after, cpu_after = _bare_rate(broker, topics[0], messages)
        bare, cpu_bare = (bare_before + bare_after) / 2, (cpu_before + cpu_after) / 2
        say("detector, two processes")
        two, two_span, two_seen, cpu_two = _two_process_rate(broker, run, messages, model, nodes, node_auth)
        say("live sample-to-finding latency")
        latencies = sorted(_latency(broker, tmp, model, node_auth))
    say("memory per tracked GPU (full windows, every node scored)")
    per_gpu = _bytes_per_gpu(model, node_auth, nodes)
    p = (lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 4)) if latencies else (
        lambda q: None)
    return {
        "features": features(model), "compression": compression, "cpus": os.cpu_count(), "node_auth": node_auth,
        "warm_samples_per_node": WARM_S, "nodes_per_job": fleet.NODES_PER_JOB,
        "crc32c": _c_crc32c(),
        "messages": messages, "nodes": nodes, "gpus_per_message": 8, "produce_msgs_per_s": round(produce_rate),
        "bare_msgs_per_s": round(bare), "bare_runs_msgs_per_s": [round(bare_before), round(bare_after)],
        "detector_msgs_per_s": round(detector), "detector_messages": seen,
        "ratio": round(detector / bare, 3) if bare else None, "two_process_msgs_per_s": round(two),
        "two_process_messages": two_seen,
        "two_process_span_msgs_per_s": round(two_span),
        "cpu_us_per_msg": {"bare": round(cpu_bare / max(messages, 1) * 1e6, 1),
                           "one_process": round(cpu_one / max(seen, 1) * 1e6, 1),
                           "two_processes": round(cpu_two / max(two_seen, 1) * 1e6, 1)},
        "gpu_samples_per_s": round(detector * 8),
        "latency_p50_s": p(0.5), "latency_p99_s": p(0.99), "latency_samples": len(latencies),
        "latency_mean_s": round(statistics.fmean(latencies), 4) if latencies else None,
        "bytes_per_gpu": round(per_gpu), "two_process_speedup": round(two / detector, 2) if detector else None,
        "goals": {"ratio": 0.8, "two_process_speedup": 1.7, "bytes_per_gpu": 4096},
    }


def _c_crc32c() -> bool:
    """Whether kafka-python checks record batches with the C CRC-32C (the ``crc32c`` package) or its own Python."""
    from kafka.record import util

    return getattr(util, "crc32c_c", None) is not None


def render_pipeline(r: dict[str, Any]) -> str:
    rows = [
        {"what": "bare kafka-python consume + decode (mean of the runs before and after the detector)",
         "msgs": r["bare_msgs_per_s"], "gpus": r["bare_msgs_per_s"] * 8},
        {"what": "detector, 1 process", "msgs": r["detector_msgs_per_s"], "gpus": r["gpu_samples_per_s"]},
        {"what": "detector, 2 processes (while both busy)", "msgs": r["two_process_msgs_per_s"],
         "gpus": r["two_process_msgs_per_s"] * 8},
        {"what": "  same, first step to last (start-up, uneven partitions)", "msgs": r["two_process_span_msgs_per_s"],
         "gpus": r["two_process_span_msgs_per_s"] * 8},
        {"what": "(producer, for reference)", "msgs": r["produce_msgs_per_s"], "gpus": r["produce_msgs_per_s"] * 8},
    ]
    on = ", ".join(k for k, v in r["features"].items() if v is True)
    model = r["features"]["hazard_model"] or "none (rules only)"
    auth = "every message signed and verified per node" if r.get("node_auth") else "no node signatures"
    return (f"detector as shipped: {on}; hazard model {model}; {auth}; producer compression {r['compression']}; "
            f"{r['cpus']} CPUs; CRC-32C in {'C' if r['crc32c'] else 'Python'}\n\n" +
            render(rows, [("what", "path"), ("msgs", "node-msgs/s"), ("gpus", "GPU-samples/s")]) +
            f"\n\nratio detector/bare: {r['ratio']} (goal >= 0.8); bare before / after the detector: "
            f"{r['bare_runs_msgs_per_s'][0]} / {r['bare_runs_msgs_per_s'][1]} msgs/s"
            f"\ntwo processes / one: {r['two_process_speedup']} (goal >= 1.7); detector CPU per message: "
            f"{r['cpu_us_per_msg']['one_process']} us in one process, {r['cpu_us_per_msg']['two_processes']} us "
            f"in each of two (the same cost means the group scales with the cores it is given)"
            f"\nsample-to-finding latency: p50 {r['latency_p50_s']} s, p99 {r['latency_p99_s']} s "
            f"({r['latency_samples']} findings)"
            f"\ndetector state: {r['bytes_per_gpu']} bytes per tracked GPU (goal <= 4096)")


if __name__ == "__main__":  # the two-process worker: python -m benchmarks.pipeline BROKER RUN GROUP MODEL NODES
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    worker(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6:7] == ["1"])
