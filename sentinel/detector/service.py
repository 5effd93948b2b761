"""The detector service: telemetry and log topics in, findings out.

Per poll: decode each message (telemetry as the detector's view of it, ``sample_view``; bad ones become dead
letters), push samples into per-node windows, run the rules, record the nodes and GPUs seen (whole samples),
publish findings keyed by node, then commit the offsets — after the effects, so a crash replays rather than loses
(findings have stable ids; the store ignores repeats).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol

from sentinel import codec
from sentinel.actuator.sealed import Sealer
from sentinel.actuator.signing import process_key
from sentinel.clock import Clock
from sentinel.config import DetectorConfig
from sentinel.detector.hazard_scoring import HazardScorer
from sentinel.detector.host_anomaly import HostAnomaly
from sentinel.detector.log_rules import dedup_key, log_rule
from sentinel.detector.peers import PeerComparison
from sentinel.detector.rules import gpus_by_pci, pci_key, remember, sample_rules, xid_rule
from sentinel.detector.sample_view import SampleView, decode_view
from sentinel.detector.shapes import check_shape
from sentinel.detector.windows import NodeWindow
from sentinel.errors import CodecError
from sentinel.events import Finding, LogEvent, Severity, TelemetrySample
from sentinel.obs.heap_trim import HeapTrim
from sentinel.obs.metrics import DetectorMetrics
from sentinel.obs.sdnotify import Heartbeat
from sentinel.transport import FINDINGS, LOGS, TELEMETRY, Message, Transport
from sentinel.transport.deadletter import DeadLetterBatch
from sentinel.transport.node_auth import NodeRefused, NodeVerifier, payload
from sentinel.transport.service import ConsumingService, run_loop

log = logging.getLogger(__name__)
XID_DEDUP_S = 60.0
RISK_TTL_S = 900.0  # a node's rule-based risk is shown this long after its last critical or fatal finding
RISKY = (Severity.CRITICAL, Severity.FATAL)
KNOWN_REFRESH_S = 60.0  # how often the scheduler's node list is read from the store
# The cyclic collector's thresholds for a detector process (CPython's default: 700, 10, 10). Each message
# allocates a few hundred short-lived objects (the decoded sample, kafka-python's record parsing), nearly all
# freed by reference counting; with the default the collector ran every few messages and, in its older
# generations, walked every window. Measured with `sentinel-bench pipeline`: docs/benchmarks.md.
GC_THRESHOLDS = (100_000, 50, 100)


def relax_gc() -> None:
    """Collect cycles far less often (process-wide; the detector service and its benchmark call it)."""
    gc.set_threshold(*GC_THRESHOLDS)


class SampleStore(Protocol):
    """What the detector needs of the store (``Repository`` provides it): nodes and GPUs last seen, and the
    nodes the scheduler manages."""

    def record_samples(self, samples: Sequence[TelemetrySample]) -> None: ...

    def scheduler_nodes(self) -> set[str]: ...


class Detector(ConsumingService):
    metrics: DetectorMetrics
    batch = 2000

    def __init__(
        self,
        transport: Transport,
        repo: SampleStore,
        config: DetectorConfig,
        metrics: DetectorMetrics,
        clock: Clock,
        group: str = "sentinel-detector",
        topics: tuple[str, str, str] = (TELEMETRY, LOGS, FINDINGS),
        hazard: HazardScorer | None = None,
        host: HostAnomaly | None = None,
        sealer: Sealer[Finding] | None = None,
        nodes: NodeVerifier | None = None,
    ) -> None:
        """``sealer`` seals every finding (``sentinel.actuator.sealed``; the composition root passes the service key,
        the default is this process's key). ``config.replay_messages``: on a partition handed over from another
        member, re-read up to that many messages before the committed offset to rebuild windows without acting
        (decision 0005). ``nodes`` (from ``security.fleet_key_file``) authenticates every telemetry and log message
        as coming from the node it names (``sentinel.transport.node_auth``); None accepts what it cannot check."""
        self.transport = transport
        self.nodes = nodes
        self.sealer = sealer if sealer is not None else Sealer(process_key(), Finding)
        self.repo = repo
        self.group = group
        self.config = config
        self.metrics = metrics
        self.clock = clock
        # other names let several pipelines share one broker (the pipeline benchmark makes fresh ones per run)
        self.telemetry_topic, self.logs_topic, self.findings_topic = topics
        self.consumer = transport.consumer(group, [self.telemetry_topic, self.logs_topic],
                                           replay_messages=config.replay_messages)
        self.samples_seen = self.gpu_samples_seen = 0  # totals since start; the metrics grow from them per batch
        self.recorded_ts: dict[str, float] = {}  # node -> sample ts last written to the store
        # (node, GPU, Xid) or (node, source, code) of kernel-log events -> when last seen (dedup)
        self.recent_events: dict[tuple[object, ...], float] = {}
        self.windows: dict[str, NodeWindow] = {}
        self.hazard = hazard  # None: rules only
        if hazard is not None:
            metrics.set_model("hazard", hazard.name[:64], hazard.created_ts)
        self.peers = PeerComparison()
        self.host = host  # each node's host metrics against its own history; None: off
        self.unsent: list[Finding] = []  # findings whose publish failed: sent before anything else, then committed
        self.dead_letters = DeadLetterBatch(transport, metrics)  # a poll's bad messages, sent in one batch
        self.known: set[str] = set()  # the scheduler's nodes (empty: not listed yet, every name accepted)
        self._known_read = float("-inf")
        self._started = 0.0
        self._seen_before = (0, 0)

    def before_poll(self) -> None:
        """Findings whose publish failed go out first; only then is their batch committed.

        Offsets are committed only once every finding of a batch is published: a finding whose publish failed
        stays in ``unsent`` and goes out here at the next step (the error propagates; ``run`` retries), and until
        then nothing past its batch is committed, so a crash meanwhile redelivers the batch."""
        if self.unsent:
            self._publish_unsent(self.clock.now())
            self.consumer.commit()

    def handle(self, messages: list[Message]) -> None:
        self._started = time.perf_counter()
        now = self.clock.now()
        if time.monotonic() - self._known_read >= KNOWN_REFRESH_S:
            self.known, self._known_read = self.repo.scheduler_nodes(), time.monotonic()
        samples: list[TelemetrySample] = []
        findings: list[Finding] = []
        self._seen_before = (self.samples_seen, self.gpu_samples_seen)
        live_nodes: list[str] = []
        for message in messages:
            record = self._decode(message, now)
            if self.known and record is not None and record.node not in self.known:
                if not message.replay:  # a name the scheduler does not manage: invented, or a misnamed agent
                    self.dead_letters.add(message, f"node {record.node!r} is not managed by the scheduler "
                                          "(agent.node must be the scheduler's node name)", now)
                continue
            if isinstance(record, SampleView):
                found = self.survive(message, partial(self.on_sample, record, now))
                if found is None:
                    continue  # dead-lettered with the error
                if not message.replay:
                    findings.extend(found)
                    live_nodes.append(record.node)
                    if record.ts - self.recorded_ts.get(record.node, -1e18) >= self.config.record_interval_s:
                        whole = self._whole(message, now)
                        if whole is not None:
                            self.recorded_ts[record.node] = record.ts
                            samples.append(whole)
            elif isinstance(record, LogEvent) and not message.replay:
                finding = self.survive(message, partial(self.on_log, record, now))
                if finding is not None:
                    findings.append(finding)
        if live_nodes:
            findings.extend(self.peers.evaluate(self.windows, live_nodes, now))
        if self.hazard is not None and live_nodes:
            findings.extend(self.hazard.score(self.windows, live_nodes, now))
            for node, probability in self.hazard.scored.items():  # the model's risk of every node it just scored
                self.metrics.set_node_risk(node, probability, now)
        self.repo.record_samples(samples)
        self.dead_letters.send()
        self.unsent.extend(findings)
        self._publish_unsent(now)
        self.metrics.expire_node_risk(now, RISK_TTL_S)

    def after_commit(self, messages: list[Message]) -> None:
        if not messages:
            return
        seen_before, gpus_before = self._seen_before
        self.metrics.samples.inc(self.samples_seen - seen_before)
        self.metrics.gpu_samples.inc(self.gpu_samples_seen - gpus_before)
        self.metrics.detect_seconds.observe(time.perf_counter() - self._started)

    def _publish_unsent(self, now: float) -> None:
        """Publish ``unsent`` in one acknowledged batch (may raise: then all stay, and go again; the store and
        the controller ignore a finding id seen twice)."""
        if not self.unsent:
            return
        self.transport.publish_batch([(self.findings_topic, f.node, self.sealer.seal(f)) for f in self.unsent])
        sent, self.unsent = self.unsent, []
        self.metrics.messages_published.labels(self.findings_topic).inc(len(sent))
        for finding in sent:
            self.metrics.findings.labels(finding.kind.value, finding.severity.value).inc()
            if finding.severity in RISKY:
                self.metrics.set_node_risk(finding.node, finding.confidence, now)

    def dead_letter(self, message: Message, reason: str) -> None:
        if not message.replay:  # a replayed message was dead-lettered when it was live
            self.dead_letters.add(message, reason, self.clock.now())

    def _decode(self, message: Message, now: float) -> SampleView | LogEvent | None:
        try:
            value = payload(message.value) if self.nodes is None else self.nodes.open(message.key, message.value)
            record: SampleView | LogEvent
            if message.topic == self.telemetry_topic:
                record = decode_view(value)
                check_shape(record, self.config.limits)
            else:
                record = codec.decode_as(value, LogEvent)
            if self.nodes is not None and record.node != message.key:
                raise NodeRefused("node_mismatch", f"signed by {message.key}'s key but names {record.node}")
            return record
        except CodecError as exc:
            if isinstance(exc, NodeRefused):
                self.metrics.telemetry_refused.labels(exc.refusal).inc()
            if not message.replay:  # a replayed message was dead-lettered when it was live
                self.dead_letters.add(message, exc.reason, now)
            return None

    def _whole(self, message: Message, now: float) -> TelemetrySample | None:
        """The whole sample, validated, to be recorded; an invalid one (in a field the detector's view skips) is
        dead-lettered: it was judged on the fields the view read, and is kept with its reason."""
        try:
            return codec.decode_as(payload(message.value), TelemetrySample)  # verified by ``_decode`` before
        except CodecError as exc:
            self.dead_letters.add(message, exc.reason, now)
            return None

    def run(self, stop: threading.Event, notify: Callable[[str], None] | None = None) -> None:
        """Consume until ``stop`` is set; a failing batch is logged and the loop goes on. ``notify`` (systemd's
        notify protocol) gets READY=1 after the first poll, then WATCHDOG=1 after every round, failed or not:
        the watchdog catches a hung loop; a broker outage is the pipeline-lag alert's business, and restarting
        the detector would not end it. Every 10 s young reference cycles are collected and freed heap memory
        goes back to the kernel (``HeapTrim``)."""
        heap = HeapTrim()  # RSS follows what the detector holds, not the largest backlog it ever caught up on
        run_loop(stop, [lambda: self.step(timeout_s=0.5)], name="detector", heartbeat=Heartbeat(notify),
                 each_round=heap.maybe)

    def on_sample(self, sample: SampleView, now: float) -> list[Finding]:
        window = self.windows.get(sample.node)
        if window is None:
            window = self.windows[sample.node] = NodeWindow(self.config.window_samples, max(len(sample.gpus), 1))
        if sample.ts <= window.last_ts and window.count:
            # Late (older than what the window holds) or delivered twice (at-least-once transport): the window
            # is in time order and a reading counts once.
            log.debug("out-of-order or repeated sample from %s ignored (%.3f <= %.3f)", sample.node, sample.ts,
                      window.last_ts)
            return []
        readings = window.push(sample)
        self.peers.observe(sample.node, sample.jobs)
        self.samples_seen += 1
        self.gpu_samples_seen += len(sample.gpus)
        found = sample_rules(window, sample, self.config, now, readings=readings)
        remember(window, sample)
        if self.host is not None:
            found.extend(self.host.observe(sample, now))
        return found

    def on_log(self, event: LogEvent, now: float) -> Finding | None:
        if (other := dedup_key(event)) is not None:  # NVSwitch and fatal NIC lines act as Xids do
            return None if self._repeated((event.node, *other), event.ts) else log_rule(event, now)
        gpu_index = event.gpu_index
        if gpu_index is None and event.pci_bus_id:
            key = pci_key(event.pci_bus_id)
            # built when a log line needs it (rare), not on every sample
            by_pci = gpus_by_pci(self.windows[event.node]) if event.node in self.windows else {}
            gpu_index = by_pci.get(key) if key else None
        window = self.windows.get(event.node)
        if window is not None and event.xid is not None and gpu_index is not None:
            window.note_xid(gpu_index, event.xid, event.ts)
        if event.xid is not None:
            # The same Xid reaches us from the kernel log and from NVML's event set, and drivers repeat lines:
            # one finding per (node, GPU, Xid) within XID_DEDUP_S is enough evidence.
            where = gpu_index if gpu_index is not None else (pci_key(event.pci_bus_id or "") or "?")
            if self._repeated((event.node, where, event.xid), event.ts):
                return None
        return xid_rule(event, now, gpu_index)

    def _repeated(self, key: tuple[object, ...], ts: float) -> bool:
        """True when the same event (node, source, code) was seen within XID_DEDUP_S; else remember it."""
        last = self.recent_events.get(key)
        if last is not None and abs(ts - last) < XID_DEDUP_S:
            return True
        self.recent_events[key] = ts
        if len(self.recent_events) > 100_000:  # bounded memory: forget the oldest half
            for old in sorted(self.recent_events, key=self.recent_events.__getitem__)[:50_000]:
                del self.recent_events[old]
        return False
