"""The composition root: builds every service from the config; nothing else constructs its dependencies.

``sentinel run`` wires agent -> detector -> controller -> actuator in one process over the embedded transport;
``sentinel demo`` does the same against the simulator (sentinel.cli.demo).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import Engine

from sentinel.actuator import Actuator, Scheduler
from sentinel.actuator.sealed import Sealer
from sentinel.actuator.service import ActuatorService
from sentinel.actuator.signing import CommandSigner, CommandVerifier, key_for, load_key, verification_keys
from sentinel.actuator.slurm import SlurmScheduler
from sentinel.actuator.steps import DryRunActuator, SchedulerActuator
from sentinel.capacity.load.service import LoadService, QueueSource, Refresher
from sentinel.clock import Clock, SystemClock
from sentinel.config import Config
from sentinel.controller.drain_watch import DrainWatch
from sentinel.controller.housekeeping import start_pruner
from sentinel.controller.service import Controller
from sentinel.detector.hazard_scoring import load_scorer
from sentinel.detector.host_anomaly import HostAnomaly
from sentinel.detector.service import Detector, relax_gc
from sentinel.errors import ConfigError, ModelRefused, TransportError
from sentinel.events import Finding
from sentinel.obs.metrics import (
    ActuatorMetrics,
    AgentMetrics,
    ControllerMetrics,
    ControllerProcessMetrics,
    DetectorMetrics,
    ForecastMetrics,
    Metrics,
    serve_metrics,
)
from sentinel.obs.sdnotify import Heartbeat, notifier
from sentinel.store import engine as store_engine
from sentinel.store.journal import StoreJournal
from sentinel.store.repository import Repository
from sentinel.transport import COMMANDS, DEAD_LETTERS, FINDINGS, LOGS, RESULTS, TELEMETRY, Transport
from sentinel.transport.memory import MemoryTransport
from sentinel.transport.node_auth import NodeSigner, NodeVerifier
from sentinel.transport.service import run_loop
from sentinel_collectors.agent import Agent, Item, Slot
from sentinel_collectors.publisher import SpoolPublisher
from sentinel_collectors.registry import COLLECTORS
from sentinel_collectors.spool import Spool

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSPORTS: dict[str, Callable[[Config], Transport]] = {
    "memory": lambda config: MemoryTransport(config.transport.capacity),
    "kafka": lambda config: _kafka(config),
}
SCHEDULERS: dict[str, Callable[[Config, Clock], Scheduler]] = {
    "kubernetes": lambda config, clock: _kubernetes(config, clock),
    "slurm": lambda config, clock: SlurmScheduler(config.actuator.slurm, clock=clock),
}
ACTUATORS = ("dryrun", *SCHEDULERS)


def build_scheduler(config: Config, clock: Clock) -> Scheduler:
    """The scheduler backend ``actuator.kind`` names (``dryrun`` has none)."""
    if config.actuator.kind == "dryrun":
        raise ConfigError('actuator.kind: "dryrun" drives no scheduler; set "slurm" or "kubernetes"')
    return plugin(SCHEDULERS, config.actuator.kind, "actuator.kind")(config, clock)


def build_actuator(config: Config, clock: Clock, metrics: ActuatorMetrics) -> Actuator:
    """The actuator ``actuator.kind`` names, counting in the service's ``metrics``."""
    plugin(dict.fromkeys(ACTUATORS), config.actuator.kind, "actuator.kind")
    if config.actuator.kind == "dryrun":
        return DryRunActuator(clock)
    return SchedulerActuator(build_scheduler(config, clock), clock, cost=config.policy.cost, metrics=metrics,
                             give_up_after_s=config.actuator.give_up_after_s)


def _kubernetes(config: Config, clock: Clock) -> Scheduler:
    from sentinel.actuator.kubernetes import KubernetesScheduler, build_api  # the client loads slowly

    k8s = config.actuator.kubernetes
    return KubernetesScheduler(build_api(k8s), k8s, clock)


def _kafka(config: Config) -> Transport:
    from sentinel.transport.kafka import KafkaTransport  # kafka-python loads slowly: only when configured

    kafka = config.transport.kafka
    return KafkaTransport(kafka.bootstrap, kafka.client, None if kafka.compression == "none" else kafka.compression,
                          kafka.send_timeout_s, kafka.session_timeout_ms, kafka.heartbeat_interval_ms)


def plugin(registry: dict[str, T], name: str, path: str) -> T:
    """Look ``name`` up in ``registry``; unknown names list the valid ones."""
    try:
        return registry[name]
    except KeyError:
        raise ConfigError(f"{path}: unknown {name!r}; valid: {', '.join(sorted(registry))}") from None


def validate(config: Config) -> None:
    """Checks that need the registries (run by ``sentinel config check`` and at start-up)."""
    plugin(TRANSPORTS, config.transport.kind, "transport.kind")
    plugin(dict.fromkeys(ACTUATORS), config.actuator.kind, "actuator.kind")
    if config.policy.command_ttl_s > config.security.max_command_ttl_s:
        raise ConfigError(f"policy.command_ttl_s: {config.policy.command_ttl_s:g} s exceeds "
                          f"security.max_command_ttl_s ({config.security.max_command_ttl_s:g} s)")
    for name in config.agent.collectors:
        plugin(COLLECTORS, name, "agent.collectors")
    if config.metrics.web_config_file:
        from sentinel.obs.web import load_web_config

        load_web_config(config.metrics.web_config_file)
    slots = {*config.agent.collectors, "nvml-events"}
    for name in config.agent.intervals:
        if name not in slots:
            raise ConfigError(f"agent.intervals.{name}: not a configured collector; configured: "
                              f"{', '.join(sorted(slots))}")


def after_bins(config: Config, metrics: ForecastMetrics, clock: Clock) -> Callable[[Engine, list[str]], dict[str, str]]:
    """What the load service does after storing new bins: refit the stored demand forecasters of their
    partitions (``load.refit``), then publish the capacity outlook's gauges."""

    def run(engine: Engine, partitions: list[str]) -> dict[str, str]:
        from sentinel.capacity.forecast.gauges import publish_outlook  # imports the forecaster (and, to fit, sklearn)
        from sentinel.capacity.forecast.resident import refresh

        done = refresh(engine, partitions) if config.load.refit else {}
        publish_outlook(engine, metrics, clock)
        return done

    return run


def build_load_service(config: Config, engine: Engine, clock: Clock, source: QueueSource | None = None,
                       refresher: Refresher | None = None) -> LoadService | None:
    """The recorder ``load.record`` asks for: squeue (``auto`` picks it when ``actuator.kind = "slurm"``), or
    None (``off``, or ``auto`` without a scheduler Sentinel can read the queue of)."""
    kind = config.load.record
    if kind == "auto":
        kind = "squeue" if config.actuator.kind == "slurm" else "off"
    if kind == "off":
        return None
    if source is None:
        from sentinel.capacity.load.squeue import SqueueSource
        from sentinel.slurm_cli import SlurmCli

        cli = SlurmCli.from_config(config.actuator.slurm)
        source = SqueueSource(runner=cli.text)
    return LoadService(engine, source, clock, config.load.interval_s, refresher)


def start_background(config: Config, repo: Repository, clock: Clock, metrics: ControllerMetrics, stop: threading.Event,
                     scheduler: Callable[[], Scheduler], controller: Controller) -> None:
    """Retention always; the drain watch (which also stores the scheduler's node list) when a scheduler is driven
    (a dry run drains nothing). Then the controller's node gate closes: its first pass runs here, before the first
    finding is judged, so a fresh install acts on the nodes the scheduler listed (a scheduler away at start: the
    list stored before stays in force; none stored yet: nothing is acted on until a pass succeeds)."""
    start_pruner(repo, config.store.retention, clock, metrics, stop)
    if config.actuator.kind != "dryrun":
        watch = DrainWatch(repo, scheduler(), clock, metrics, config.policy.drain_watch_s)
        try:
            watch.check()
        except Exception:  # the store away for a moment: the watch's own thread tries again
            log.exception("drain watch: first pass failed; retrying in %.0f s", watch.interval_s)
        controller.gate_nodes = True
        watch.start(stop, first_wait_s=watch.interval_s)


def open_repository(config: Config, migrate: bool) -> Repository:
    engine = store_engine.make_engine(config.store.url, must_exist=not migrate)
    if migrate:
        store_engine.upgrade(engine)
    else:
        store_engine.require_current(engine)
    return Repository(engine)


def command_signing(config: Config, clock: Clock, repo: Repository,
                    require_key_file: bool) -> tuple[CommandSigner, CommandVerifier]:
    """The signer (controller side) and verifier (actuator side) of commands; nonces are kept in the store.

    Without ``security.key_file`` both use this process's random key, which is only sound when controller and
    actuator share the process: the separate services pass ``require_key_file=True``.
    """
    security = config.security
    if require_key_file and not security.key_file:
        raise ConfigError("security.key_file: required when the controller and actuator talk over Kafka; create "
                          "one with `sentinel keygen FILE` (mode 0600) and set it in the config (docs/security.md)")
    key = key_for(security.key_file)
    keys = verification_keys(security.key_file, security.previous_key_files) if security.key_file else [key]
    return CommandSigner(key), CommandVerifier(keys, repo, clock, security.max_command_ttl_s)


@dataclass
class Pipeline:
    transport: Transport
    repo: Repository
    metrics: Metrics
    detector: Detector
    controller: Controller
    actuator: ActuatorService

    def pump(self, max_rounds: int = 1000) -> int:
        """Let every service handle what is waiting until the pipeline is quiet; return messages handled."""
        total = 0
        for _ in range(max_rounds):
            moved = self.detector.step() + self.controller.step() + self.actuator.step()
            total += moved
            if moved == 0:
                break
        return total


def build_pipeline(
    config: Config,
    clock: Clock,
    metrics: Metrics,
    repo: Repository,
    actuator: Actuator | None = None,
    transport: Transport | None = None,
    workers: int = 0,
) -> Pipeline:
    """The one-process pipeline. ``workers`` > 0 runs commands on threads (``sentinel run``: a slurmctld outage
    must not stop sampling); 0 runs them inline, so ``Pipeline.pump`` returns with every effect done (tests)."""
    validate(config)
    transport = (
        transport if transport is not None else plugin(TRANSPORTS, config.transport.kind, "transport.kind")(config)
    )
    signing = command_signing(config, clock, repo, require_key_file=False)
    controller, actuator_service = build_effects(config, clock, metrics, repo, transport, actuator, workers, signing)
    return Pipeline(transport=transport, repo=repo, metrics=metrics,
                    detector=build_detector(config, clock, metrics, repo, transport),
                    controller=controller, actuator=actuator_service)


def model_keys(config: Config) -> list[bytes] | None:
    """With a service key, only models it (or a previous key) signed are loaded."""
    if not config.security.key_file:
        return None
    return [k.secret for k in verification_keys(config.security.key_file, config.security.previous_key_files)]


def build_detector(config: Config, clock: Clock, metrics: DetectorMetrics, repo: Repository,
                   transport: Transport) -> Detector:
    hazard = None
    try:
        hazard = load_scorer(config.detector.hazard, model_keys(config))
    except ModelRefused as exc:  # a refused model must not blind the rules: run on them, loudly
        log.error("the hazard model is refused, detecting with the rules only: %s", exc)
        metrics.model_refused.set(1)
    if hazard is not None:
        log.info("hazard model: %s (threshold %.3f, horizon %.0f s)", hazard.name, hazard.threshold,
                 hazard.model.horizon_s)
    elif not config.detector.hazard.model:
        log.info("hazard model: rules only (detector.hazard.model is empty)")
    host = HostAnomaly.from_config(config.detector.host_anomaly) if config.detector.host_anomaly.enabled else None
    sealer = Sealer(key_for(config.security.key_file), Finding)  # the controller acts on sealed findings only
    return Detector(transport, repo, config.detector, metrics, clock, hazard=hazard, host=host, sealer=sealer,
                    nodes=node_verifier(config))


def node_verifier(config: Config) -> NodeVerifier | None:
    """Per-node telemetry identity from ``security.fleet_key_file`` (None: unset, messages are not checked)."""
    security = config.security
    if not security.fleet_key_file:
        return None
    fleet = [load_key(security.fleet_key_file, "security.fleet_key_file"),
             *(load_key(p, "security.previous_fleet_key_files") for p in security.previous_fleet_key_files)]
    return NodeVerifier([k.secret for k in fleet])


def build_effects(config: Config, clock: Clock, metrics: ControllerProcessMetrics, repo: Repository,
                  transport: Transport, actuator: Actuator | None, workers: int,
                  signing: tuple[CommandSigner, CommandVerifier]) -> tuple[Controller, ActuatorService]:
    """The controller and the actuator service with ``signing`` (``command_signing``); the journal in the store."""
    signer, verifier = signing
    if actuator is None:
        actuator = build_actuator(config, clock, metrics)
    controller = Controller(transport, repo, config.policy, metrics, clock, signer=signer, alerts=config.alerts,
                            trusted=verifier.keys.values())
    service = ActuatorService(transport, actuator, metrics, clock, verifier=verifier,
                              journal=StoreJournal(repo.engine), workers=workers,
                              owner=f"{config.node_name()}/actuator")
    return controller, service


def build_slots(config: Config, clock: Clock) -> list[Slot]:
    node = config.node_name()
    return [slot for name in config.agent.collectors
            for slot in plugin(COLLECTORS, name, "agent.collectors")(config, node, clock)]


def build_agent(config: Config, clock: Clock, metrics: AgentMetrics, sink: Callable[[list[Item]], None],
                slots: list[Slot] | None = None) -> Agent:
    slots = build_slots(config, clock) if slots is None else slots
    frame = None
    if config.agent.node_key_file:  # every message signed as this node's (the detector checks it)
        frame = NodeSigner(load_key(config.agent.node_key_file, "agent.node_key_file").secret).frame
    return Agent(config.node_name(), slots, sink, metrics, clock, config.agent.interval_s, notify=notifier(),
                 frame=frame)


def run(config: Config, stop: threading.Event, max_cycles: int | None = None) -> Pipeline:
    """Run the whole pipeline on this machine until ``stop`` is set (or ``max_cycles`` intervals passed)."""
    clock = SystemClock()
    metrics = Metrics()
    repo = open_repository(config, migrate=True)
    pipeline = build_pipeline(config, clock, metrics, repo, workers=config.actuator.workers)

    def sink(items: list[Item]) -> None:
        try:
            pipeline.transport.publish_batch(items)
        except TransportError as exc:  # embedded transport full: the detector is behind; count, keep sampling
            metrics.publish_refused.labels(items[0][0]).inc()
            log.warning("sample not accepted by the embedded transport: %s", exc)

    agent = build_agent(config, clock, metrics, sink)
    close_metrics = serve_metrics(config.metrics.listen, metrics, config.metrics)
    load = build_load_service(config, repo.engine, clock, refresher=after_bins(config, metrics, clock))
    start_background(config, repo, clock, metrics, stop, lambda: build_scheduler(config, clock),
                     pipeline.controller)
    try:
        _run_rounds(config, stop, max_cycles, agent, pipeline, load)
        if max_cycles is not None:  # a bounded run ends with its commands carried out and their results stored
            pipeline.actuator.wait()
            pipeline.pump()
    finally:
        close_metrics()
        pipeline.actuator.close()
        pipeline.transport.close()
    return pipeline


def _run_rounds(config: Config, stop: threading.Event, max_cycles: int | None, agent: Agent,
                pipeline: Pipeline, load: LoadService | None = None) -> None:
    """One agent cycle, then the pipeline until quiet (and a load bin when one is due), every ``agent.interval_s``."""

    def one_round() -> None:
        sample, _logs = agent.cycle()
        pipeline.pump()
        if load is not None:
            load.observe([sample])
            load.step()

    # systemd Type=notify: ready after the first round, then the watchdog
    run_loop(stop, [one_round], name="sentinel run", heartbeat=agent.heartbeat, interval_s=config.agent.interval_s,
             max_rounds=max_cycles)


def topic_partitions(config: Config) -> dict[str, int]:
    """Partition count per topic; the commands topic has one, so one actuator consumes it at a time."""
    names = {"telemetry": TELEMETRY, "logs": LOGS, "findings": FINDINGS, "results": RESULTS,
             "dead-letters": DEAD_LETTERS}
    counts = {names[k]: v for k, v in config.transport.kafka.partitions.items()}
    return {**{topic: 1 for topic in names.values()}, **counts, COMMANDS: 1}


def _service_transport(config: Config) -> Transport:
    if config.transport.kind == "memory":
        raise ConfigError('transport.kind: separate services need "kafka" (use `sentinel run` for one machine)')
    transport = plugin(TRANSPORTS, config.transport.kind, "transport.kind")(config)
    ensure = getattr(transport, "ensure_topics", None)
    if ensure is not None:
        ensure(topic_partitions(config))
    return transport


def run_detector(config: Config, stop: threading.Event, metrics: DetectorMetrics | None = None) -> Detector:
    """One detector group member: telemetry and logs in, findings out (scale out by starting more)."""
    metrics = metrics if metrics is not None else DetectorMetrics()
    if config.transport.kind != "memory" and not config.security.key_file:  # it seals findings with that key
        raise ConfigError("security.key_file: required by the detector service (it seals its findings with the "
                          "key the controller holds); the same file as the controller's (docs/security.md)")
    if not config.security.fleet_key_file:
        log.warning("security.fleet_key_file is not set: telemetry is not authenticated per node, so whoever can "
                    "produce to the telemetry topic can speak for any node (docs/security.md)")
    relax_gc()
    transport = _service_transport(config)
    repo = open_repository(config, migrate=False)
    detector = build_detector(config, SystemClock(), metrics, repo, transport)
    close_metrics = serve_metrics(config.metrics.listen, metrics, config.metrics)
    try:
        detector.run(stop, notify=notifier())
    finally:
        close_metrics()
        detector.consumer.close()
        transport.close()
    return detector


def run_controller(config: Config, stop: threading.Event, metrics: ControllerProcessMetrics | None = None,
                   actuator: Actuator | None = None) -> None:
    """Findings -> policy -> commands (any number of controllers on one store: they judge in turn under the
    breaker's lock), and the actuator (one active: the commands topic has one partition; its commands run on
    worker threads, so this loop and its watchdog never wait on a scheduler)."""
    metrics = metrics if metrics is not None else ControllerProcessMetrics()
    clock = SystemClock()
    repo = open_repository(config, migrate=False)
    signing = command_signing(config, clock, repo, require_key_file=True)  # a missing key: refused before Kafka
    transport = _service_transport(config)
    controller, actuator_service = build_effects(config, clock, metrics, repo, transport, actuator,
                                                 config.actuator.workers, signing)
    close_metrics = serve_metrics(config.metrics.listen, metrics, config.metrics)
    controller.refresh_gauges(clock.now())  # an open breaker shows at once after a restart
    load = build_load_service(config, repo.engine, clock, refresher=after_bins(config, metrics, clock))
    start_background(config, repo, clock, metrics, stop, lambda: build_scheduler(config, clock), controller)
    steps: list[Callable[[], object]] = [lambda: controller.step(timeout_s=0.2),
                                         lambda: actuator_service.step(timeout_s=0.2)]
    if load is not None:
        steps.append(load.step)
    try:
        run_loop(stop, steps, name="controller", heartbeat=Heartbeat(notifier()))
    finally:
        close_metrics()
        actuator_service.close()
        controller.consumer.close()
        actuator_service.consumer.close()
        transport.close()


def run_agent(config: Config, stop: threading.Event, max_cycles: int | None = None, slots: list[Slot] | None = None,
              metrics: AgentMetrics | None = None) -> Agent:
    """The node agent alone: collectors -> on-disk spool -> Kafka (a publisher thread drains the spool).

    ``slots`` replaces the configured collectors (tests and benchmarks pass fake-NVML slots here).
    """
    if config.transport.kind == "memory":
        raise ConfigError('transport.kind: the node agent needs "kafka" (use `sentinel run` for one machine)')
    clock, metrics = SystemClock(), metrics if metrics is not None else AgentMetrics()
    if not config.agent.node_key_file:
        log.warning("agent.node_key_file is not set: this node's telemetry is not signed; a detector that checks "
                    "node identity (security.fleet_key_file) refuses it (docs/security.md)")
    transport = plugin(TRANSPORTS, config.transport.kind, "transport.kind")(config)
    spool = Spool(config.agent.spool_path, config.agent.spool_max_messages)

    def sink(items: list[Item]) -> None:
        dropped = spool.append(items)
        if dropped:
            metrics.spool_dropped.inc(dropped)
        metrics.spool_depth.set(spool.depth())

    agent = build_agent(config, clock, metrics, sink, slots)
    close_metrics = serve_metrics(config.agent.metrics_listen, metrics, config.metrics)
    publisher_stop = threading.Event()
    thread = SpoolPublisher(spool, transport, metrics).start(publisher_stop)
    try:
        agent.run(stop, max_cycles)
        deadline = time.monotonic() + config.transport.kafka.send_timeout_s
        while spool.depth() and time.monotonic() < deadline:  # give the publisher a moment to flush
            time.sleep(0.05)
    finally:
        close_metrics()
        publisher_stop.set()
        thread.join(timeout=30)
        transport.close()
        spool.close()
    return agent
