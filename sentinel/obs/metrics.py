"""Every Prometheus metric Sentinel exports, grouped by the service that counts it; a process registers only
the groups of the services it runs.

``ServiceMetrics`` holds what every process exports (transport traffic, consumer lag, dead letters, refused
scrapes); each service's group adds its own on top: ``AgentMetrics``, ``DetectorMetrics``, ``ControllerMetrics``
(incl. the controller's retention and drain-watch threads), ``ActuatorMetrics``, ``ForecastMetrics``. A
process's metrics object is the union of its services' groups (``ControllerProcessMetrics`` for
``sentinel controller``, ``Metrics`` — every group — for ``sentinel run`` and the demo); each service is typed
with the one group it uses, so a service that counted another's metric would not type-check.

Names follow Prometheus conventions: ``sentinel_`` prefix, base units, ``_total`` on counters, low-cardinality
labels (never a node name on a counter that grows with the fleet, except the per-node risk gauge, whose series
expire with the risk). deploy/prometheus/ holds the alert and recording rules over these names and
deploy/grafana/ the dashboard; tests/test_metric_names.py keeps both in step with this module.

Setters are the contract for the parts that publish values from models (hazard, forecast): they validate what
they are given so a bad model output becomes an error, not a strange series. The module imports only the floor
(errors, events, topics), not the configuration.
"""

from __future__ import annotations

import logging
import math
import re
import ssl
from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from sentinel.errors import ValidationError
from sentinel.events import ActionKind, FindingClass, Mode, Severity, Step, StepStatus
from sentinel.topics import COMMANDS, FINDINGS, LOGS, RESULTS, TELEMETRY

HORIZON_PATTERN = re.compile(r"^[1-9][0-9]{0,3}[mhd]\Z")  # "10m", "1h", "3h", "24h": a handful of series


log = logging.getLogger(__name__)


class ServiceMetrics:
    """What every process exports. Subclasses register their group after this one; a class that combines groups
    (``Metrics``) registers each once (cooperative ``__init__`` along the MRO). Known label sets are exported at 0
    from the start: ``increase()`` cannot see a series' first sample, so an alert on the first fatal finding or
    failed step would otherwise miss it."""

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
        self.metrics_auth_rejected = Counter(
            "sentinel_metrics_auth_rejected_total", "Scrapes of /metrics refused for missing or wrong basic auth.",
            registry=r,
        )
        self.dead_letters = Counter(
            "sentinel_dead_letters_total", "Messages moved to the dead-letter topic.", ["topic"], registry=r
        )
        self.poison_messages = Counter(
            "sentinel_poison_messages_total", "Messages whose handling raised: dead-lettered, not retried.",
            ["topic", "error"], registry=r,
        )
        self.consumer_lag = Gauge(
            "sentinel_consumer_lag_messages",
            "Messages between a consumer group's position and the high watermark of the topic's partitions.",
            ["group", "topic"], registry=r,
        )
        for topic in (TELEMETRY, LOGS, FINDINGS, COMMANDS, RESULTS):
            self.dead_letters.labels(topic)

    def set_consumer_lag(self, group: str, lags: dict[str, int]) -> None:
        """Publish a consumer's lag per topic (``Consumer.lag()``)."""
        for topic, behind in lags.items():
            self.consumer_lag.labels(group, topic).set(behind)


class AgentMetrics(ServiceMetrics):
    """The node agent: collector reads, its spool and the publisher that empties it."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        r = self.registry
        self.samples_collected = Counter(
            "sentinel_agent_samples_total", "Telemetry samples the agent produced.", registry=r
        )
        self.collector_errors = Counter(
            "sentinel_collector_errors_total", "Collector reads that failed.", ["collector"], registry=r
        )
        self.publish_seconds = Histogram(
            "sentinel_publish_duration_seconds", "Time to get one batch acknowledged by the transport.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0), registry=r,
        )
        self.publish_failures = Counter(
            "sentinel_publish_failures_total", "Batches the transport did not acknowledge (kept and retried), by "
            "reason: `transport` (broker away, timeout) or the error's type (a client misconfiguration).",
            ["reason"], registry=r,
        )
        self.spool_depth = Gauge("sentinel_spool_messages", "Messages waiting in the agent's spool.", registry=r)
        self.spool_dropped = Counter(
            "sentinel_spool_dropped_total",
            "Oldest spooled messages dropped because the spool was full (its bound or the disk).", registry=r
        )
        self.agent_cycle_seconds = Histogram(
            "sentinel_agent_cycle_duration_seconds", "Time to read all due collectors once.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5), registry=r,
        )


class DetectorMetrics(ServiceMetrics):
    """The detector: samples scored, findings published, per-node risk and the models in use."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        r = self.registry
        self.samples = Counter("sentinel_samples_total", "Telemetry samples processed by the detector.", registry=r)
        self.gpu_samples = Counter("sentinel_gpu_samples_total", "Per-GPU readings processed.", registry=r)
        self.telemetry_refused = Counter(
            "sentinel_telemetry_refused_total", "Telemetry and log messages refused for their node signature.",
            ["reason"], registry=r)
        self.findings = Counter("sentinel_findings_total", "Findings published.", ["kind", "severity"], registry=r)
        self.node_risk = Gauge(
            "sentinel_node_risk",
            "Probability (0-1) that the node fails soon: the hazard model's estimate, else the confidence of its "
            "latest critical or fatal finding. A node's series expires when nothing renews it.",
            ["node"], registry=r,
        )
        self.detect_seconds = Histogram(
            "sentinel_detect_duration_seconds",
            "Detector time per telemetry batch.",
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0),
            registry=r,
        )
        self.model_info = Gauge(
            "sentinel_model_info", "1 for each model in use, labelled with its version.", ["model", "version"],
            registry=r,
        )
        self.model_trained = Gauge(
            "sentinel_model_trained_timestamp_seconds",
            "When the model in use was trained (its age is time() minus this).", ["model"], registry=r,
        )
        self.model_refused = Gauge(
            "sentinel_model_refused",
            "1 while the configured hazard model was refused (unsigned, changed after training, in an unsafe "
            "folder, ...) and the detector runs on its rules only.", registry=r,
        )
        self._risk_ts: dict[str, float] = {}
        self._model_versions: dict[str, str] = {}
        for kind in FindingClass:
            for severity in Severity:
                self.findings.labels(kind.value, severity.value)

    def set_node_risk(self, node: str, probability: float, now: float) -> None:
        """Publish ``node``'s failure probability (0-1); it stays until renewed or expired by ``expire_node_risk``."""
        _check(0.0 <= probability <= 1.0, f"node risk must be in [0, 1], got {probability!r}")
        self.node_risk.labels(node).set(probability)
        self._risk_ts[node] = now

    def expire_node_risk(self, now: float, ttl_s: float) -> list[str]:
        """Drop the series of nodes whose risk was not renewed within ``ttl_s``; return those nodes."""
        stale = [node for node, ts in self._risk_ts.items() if now - ts > ttl_s]
        for node in stale:
            del self._risk_ts[node]
            self.node_risk.remove(node)
        return stale

    def set_model(self, name: str, version: str, trained_ts: float) -> None:
        """Record the model in use under ``name`` (hazard, anomaly, forecast...); replaces its previous version."""
        _check(bool(re.fullmatch(r"[a-z][a-z0-9_]{0,31}", name)), f"model name must be snake_case, got {name!r}")
        _check(0 < len(version) <= 64, f"model version must be 1-64 characters, got {version!r}")
        _check(math.isfinite(trained_ts) and trained_ts >= 0, f"trained_ts must be a timestamp, got {trained_ts!r}")
        old = self._model_versions.get(name)
        if old is not None and old != version:
            self.model_info.remove(name, old)
        self._model_versions[name] = version
        self.model_info.labels(name, version).set(1)
        self.model_trained.labels(name).set(trained_ts)


class ControllerMetrics(ServiceMetrics):
    """The controller: decisions, guards, the breaker, alerts, incidents, the outbox and its two threads
    (store retention, the drain watch)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        r = self.registry
        self.decisions = Counter("sentinel_decisions_total", "Policy decisions.", ["action", "mode"], registry=r)
        self.guard_blocks = Counter(
            "sentinel_guard_blocks_total",
            "Actions a guard or the breaker turned into observe-only.",
            ["guard"],
            registry=r,
        )
        self.records_refused = Counter(
            "sentinel_records_refused_total", "Findings and results refused: unsealed, forged, unknown key.",
            ["topic", "reason"], registry=r,
        )
        self.commands_issued = Counter(
            "sentinel_commands_issued_total", "Commands the controller sent to the actuator.", ["action"], registry=r
        )
        self.commands = Counter(
            "sentinel_commands_total", "Commands finished, by the status of their final (verify) step.", ["result"],
            registry=r,
        )
        self.pruned_rows = Counter(
            "sentinel_store_pruned_rows_total", "Rows store retention deleted (store.retention), per table.",
            ["table"], registry=r
        )
        self.nodes_returned = Counter(
            "sentinel_nodes_returned_total",
            "Nodes Sentinel drained that the scheduler shows back in service without it (sentinel check --resume, "
            "scontrol resume, kubectl uncordon): drain mark cleared, incident resolved.", registry=r
        )
        self.commands_resent = Counter(
            "sentinel_commands_resent_total",
            "Commands the controller's outbox published again: no final result arrived within "
            "policy.command_resend_s (a lost message, or an actuator that died mid-command).", registry=r
        )
        self.commands_expired = Counter(
            "sentinel_commands_expired_total",
            "Decided commands that expired before the actuator took them (never carried out).", registry=r
        )
        self.lemon_nodes = Gauge(
            "sentinel_lemon_nodes", "Nodes with policy.lemon.min_incidents incidents inside policy.lemon.window_s.",
            registry=r,
        )
        self.open_incidents = Gauge("sentinel_open_incidents", "Incidents not yet resolved.", registry=r)
        self.alerts = Counter(
            "sentinel_alerts_total", "Operator-facing alerts raised (one per node episode; docs/alerts.md).",
            ["kind"], registry=r)
        self.alerts_held = Counter(
            "sentinel_alerts_held_total", "Alerts held, not sent again: the node's previous alert had just ended.",
            registry=r)
        self.node_alert = Gauge(
            "sentinel_node_alert", "1 while the node has an open operator-facing alert (docs/alerts.md).",
            ["node", "kind"], registry=r)
        self.nodes = Gauge(
            "sentinel_nodes",
            "Known nodes by state: reporting, silent (no sample stored recently) or drained (held by Sentinel).",
            ["state"], registry=r,
        )
        self.breaker_open = Gauge("sentinel_breaker_open", "1 while the circuit breaker is open.", registry=r)
        self._alerting: set[tuple[str, str]] = set()
        for action in ActionKind:
            for mode in Mode:
                self.decisions.labels(action.value, mode.value)
            self.commands_issued.labels(action.value)
        for kind in FindingClass:
            self.alerts.labels(kind.value)
        for status in StepStatus:
            self.commands.labels(status.value)

    def set_node_alerts(self, alerting: dict[str, str]) -> None:
        """``sentinel_node_alert`` is 1 for exactly the nodes of ``alerting`` (node -> its alert's kind): an alert
        that resolved loses its series, so the Prometheus alert on it resolves too."""
        current = {(n, k) for n, k in alerting.items()}
        for node, kind in self._alerting - current:
            self.node_alert.remove(node, kind)
        for node, kind in current:
            self.node_alert.labels(node, kind).set(1)
        self._alerting = current


class ActuatorMetrics(ServiceMetrics):
    """The actuator: commands refused, steps carried out, resumed or interrupted, checkpoints skipped."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        r = self.registry
        self.action_steps = Counter(
            "sentinel_action_steps_total", "Actuator steps by step and status.", ["step", "status"], registry=r
        )
        self.commands_rejected = Counter(
            "sentinel_commands_rejected_total",
            "Commands the actuator refused and did not act on (unsigned, tampered, expired, replayed, ...).",
            ["reason"], registry=r,
        )
        self.commands_resumed = Counter(
            "sentinel_commands_resumed_total",
            "Commands the actuator resumed from its journal after an interruption (restart, redelivery, re-send).",
            registry=r,
        )
        self.actuator_errors = Counter(
            "sentinel_actuator_errors_total",
            "Commands interrupted by an unexpected error, by the error's type; kept unfinished and resumed later.",
            ["error"], registry=r,
        )
        self.actuator_in_flight = Gauge(
            "sentinel_actuator_commands_in_flight", "Commands the actuator is carrying out now.", registry=r
        )
        self.checkpoints_skipped = Counter(
            "sentinel_checkpoints_skipped_total",
            "Job checkpoints the actuator skipped as not worth it (recent checkpoint, job ends soon).",
            ["reason"], registry=r,
        )
        for status in StepStatus:
            for step in Step:
                self.action_steps.labels(step.value, status.value)


class ForecastMetrics(ServiceMetrics):
    """The capacity outlook the load recorder publishes after each refit."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        r = self.registry
        self.forecast_demand = Gauge(
            "sentinel_forecast_demand_gpus",
            "Forecast GPU demand (running plus pending) at the horizon; bound is mean, lower or upper.",
            ["horizon", "bound"], registry=r,
        )
        self.forecast_lost = Gauge(
            "sentinel_forecast_expected_lost_gpus", "GPUs expected to fail within the horizon (sum of hazards).",
            ["horizon"], registry=r,
        )
        self.forecast_healthy = Gauge(
            "sentinel_forecast_healthy_gpus", "GPUs in service and healthy when the forecast was made.", registry=r
        )
        self.forecast_margin = Gauge(
            "sentinel_forecast_capacity_margin_gpus",
            "Healthy GPUs minus expected losses minus the upper bound of forecast demand; below 0 is a shortfall.",
            ["horizon"], registry=r,
        )
        self.forecast_generated = Gauge(
            "sentinel_forecast_generated_timestamp_seconds", "When the latest forecast was made.", registry=r
        )

    def set_forecast(self, horizon: str, demand_gpus: float, demand_lower_gpus: float, demand_upper_gpus: float,
                     expected_lost_gpus: float, healthy_gpus: float, now: float) -> float:
        """Publish one horizon of the capacity outlook; return the margin (healthy - lost - upper demand)."""
        _check(bool(HORIZON_PATTERN.match(horizon)), f"horizon must look like 10m, 3h or 1d, got {horizon!r}")
        values = (demand_gpus, demand_lower_gpus, demand_upper_gpus, expected_lost_gpus, healthy_gpus, now)
        _check(all(math.isfinite(v) and v >= 0 for v in values), f"forecast values must be finite and >= 0: {values}")
        _check(demand_lower_gpus <= demand_gpus <= demand_upper_gpus,
               f"demand interval must hold the mean: {demand_lower_gpus} <= {demand_gpus} <= {demand_upper_gpus}")
        for bound, value in (("mean", demand_gpus), ("lower", demand_lower_gpus), ("upper", demand_upper_gpus)):
            self.forecast_demand.labels(horizon, bound).set(value)
        self.forecast_lost.labels(horizon).set(expected_lost_gpus)
        self.forecast_healthy.set(healthy_gpus)
        margin = healthy_gpus - expected_lost_gpus - demand_upper_gpus
        self.forecast_margin.labels(horizon).set(margin)
        self.forecast_generated.set(now)
        return margin




class ControllerProcessMetrics(ControllerMetrics, ActuatorMetrics, ForecastMetrics):
    """``sentinel controller``: the controller, the actuator beside it and the load recorder's forecast."""


class Metrics(AgentMetrics, DetectorMetrics, ControllerProcessMetrics):
    """Every group: one process that runs everything (``sentinel run``, the demo, the benchmarks)."""


class ExporterTls(Protocol):
    """How /metrics is served (``metrics`` section of the config): a certificate, a client CA, or a Prometheus web
    config file (TLS and basic auth)."""

    @property
    def cert_file(self) -> str: ...
    @property
    def key_file(self) -> str: ...
    @property
    def client_ca_file(self) -> str: ...
    @property
    def web_config_file(self) -> str: ...


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValidationError(message)


def serve_metrics(listen: str, metrics: ServiceMetrics, tls: ExporterTls | None = None) -> Callable[[], None]:
    """Serve ``metrics`` on http(s)://LISTEN/metrics (nothing when ``listen`` is empty): HTTPS with ``tls``'s
    certificate, client certificates required with its CA, or as its Prometheus web config file says (TLS and
    basic auth, sentinel/obs/web.py); return what stops it."""
    if not listen:
        return lambda: None
    host, _, port = listen.rpartition(":")
    from sentinel.obs.web import WebConfig, load_web_config, serve_web

    if tls is not None and tls.web_config_file:
        web = load_web_config(tls.web_config_file)
        if web.users and not web.tls:
            log.warning("metrics: basic auth without TLS sends passwords in clear on %s", listen)
    elif tls is not None and tls.cert_file:
        web = WebConfig(cert_file=tls.cert_file, key_file=tls.key_file, client_ca_file=tls.client_ca_file,
                        client_auth=ssl.CERT_REQUIRED if tls.client_ca_file else ssl.CERT_NONE)
    else:  # plain HTTP: prometheus_client's own server (IPv6 included); no handshake to hold the loop up
        server, thread = start_http_server(int(port), addr=host, registry=metrics.registry)
        log.info("serving metrics on http://%s/metrics", listen)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        return stop
    close = serve_web(host.strip("[]"), int(port), metrics.registry, web, metrics.metrics_auth_rejected.inc)
    log.info("serving metrics on %s://%s/metrics (%s)", "https" if web.tls else "http", listen,
             "basic auth" if web.users else "client certificates" if web.client_ca_file else "no auth")
    return close
