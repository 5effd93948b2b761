"""Every Prometheus metric Sentinel exports, on one injected registry.

Names follow Prometheus conventions: ``sentinel_`` prefix, base units, ``_total`` on counters, low-cardinality
labels (never a node name on a counter that grows with the fleet, except the per-node risk gauge).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.messages_published = Counter(
            "sentinel_messages_published_total", "Messages published to a transport topic.", ["topic"], registry=r
        )
        self.messages_consumed = Counter(
            "sentinel_messages_consumed_total", "Messages consumed from a transport topic.", ["topic"], registry=r
        )
        self.publish_refused = Counter(
            "sentinel_publish_refused_total", "Messages a full or closed transport refused.", ["topic"], registry=r
        )
        self.dead_letters = Counter(
            "sentinel_dead_letters_total", "Messages moved to the dead-letter topic.", ["topic"], registry=r
        )
        self.samples_collected = Counter(
            "sentinel_agent_samples_total", "Telemetry samples the agent produced.", registry=r
        )
        self.samples = Counter("sentinel_samples_total", "Telemetry samples processed by the detector.", registry=r)
        self.gpu_samples = Counter("sentinel_gpu_samples_total", "Per-GPU readings processed.", registry=r)
        self.findings = Counter("sentinel_findings_total", "Findings published.", ["kind", "severity"], registry=r)
        self.decisions = Counter("sentinel_decisions_total", "Policy decisions.", ["action", "mode"], registry=r)
        self.guard_blocks = Counter(
            "sentinel_guard_blocks_total",
            "Actions a guard or the breaker turned into observe-only.",
            ["guard"],
            registry=r,
        )
        self.action_steps = Counter(
            "sentinel_action_steps_total", "Actuator steps by step and status.", ["step", "status"], registry=r
        )
        self.commands_rejected = Counter(
            "sentinel_commands_rejected_total",
            "Commands the actuator refused and did not act on (unsigned, tampered, expired, replayed, ...).",
            ["reason"], registry=r,
        )
        self.lemon_nodes = Gauge(
            "sentinel_lemon_nodes", "Nodes with policy.lemon.min_incidents incidents inside policy.lemon.window_s.",
            registry=r,
        )
        self.checkpoints_skipped = Counter(
            "sentinel_checkpoints_skipped_total",
            "Job checkpoints the actuator skipped as not worth it (recent checkpoint, job ends soon).",
            ["reason"], registry=r,
        )
        self.open_incidents = Gauge("sentinel_open_incidents", "Incidents not yet resolved.", registry=r)
        self.breaker_open = Gauge("sentinel_breaker_open", "1 while the circuit breaker is open.", registry=r)
        self.collector_errors = Counter(
            "sentinel_collector_errors_total", "Collector reads that failed.", ["collector"], registry=r
        )
        self.publish_seconds = Histogram(
            "sentinel_publish_duration_seconds", "Time to get one batch acknowledged by the transport.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0), registry=r,
        )
        self.publish_failures = Counter(
            "sentinel_publish_failures_total", "Batches the transport did not acknowledge (kept and retried).",
            registry=r,
        )
        self.spool_depth = Gauge("sentinel_spool_messages", "Messages waiting in the agent's spool.", registry=r)
        self.spool_dropped = Counter(
            "sentinel_spool_dropped_total", "Oldest spooled messages dropped because the spool was full.", registry=r
        )
        self.agent_cycle_seconds = Histogram(
            "sentinel_agent_cycle_duration_seconds", "Time to read all due collectors once.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5), registry=r,
        )
        self.detect_seconds = Histogram(
            "sentinel_detect_duration_seconds",
            "Detector time per telemetry batch.",
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0),
            registry=r,
        )
