"""The composition root: builds every service from the config; nothing else constructs its dependencies.

``sentinel run`` wires agent -> detector -> controller -> actuator in one process over the embedded transport;
``sentinel demo`` does the same against the simulator (sentinel.demo).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import start_http_server

from collectors.agent import Agent
from collectors.host import HostCollector
from sentinel.actuator import Actuator
from sentinel.actuator.service import ActuatorService
from sentinel.actuator.steps import DryRunActuator
from sentinel.clock import Clock, SystemClock
from sentinel.config import Config
from sentinel.controller import Controller
from sentinel.detector.service import Detector
from sentinel.errors import ConfigError
from sentinel.metrics import Metrics
from sentinel.policy.breaker import Breaker
from sentinel.policy.engine import PolicyEngine
from sentinel.store import engine as store_engine
from sentinel.store.repository import Repository
from sentinel.transport import Transport
from sentinel.transport.memory import MemoryTransport

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSPORTS: dict[str, Callable[[Config], Transport]] = {
    "memory": lambda config: MemoryTransport(config.transport.capacity),
}
ACTUATORS: dict[str, Callable[[Config, Clock], Actuator]] = {
    "dryrun": lambda config, clock: DryRunActuator(clock),
}
COLLECTORS: dict[str, Callable[[], HostCollector]] = {
    "host": HostCollector,
}


def plugin(registry: dict[str, T], name: str, path: str) -> T:
    """Look ``name`` up in ``registry``; unknown names list the valid ones."""
    try:
        return registry[name]
    except KeyError:
        raise ConfigError(f"{path}: unknown {name!r}; valid: {', '.join(sorted(registry))}") from None


def validate(config: Config) -> None:
    """Checks that need the registries (run by ``sentinel config check`` and at start-up)."""
    plugin(TRANSPORTS, config.transport.kind, "transport.kind")
    plugin(ACTUATORS, config.actuator.kind, "actuator.kind")
    for name in config.agent.collectors:
        plugin(COLLECTORS, name, "agent.collectors")


def open_repository(config: Config, migrate: bool) -> Repository:
    engine = store_engine.make_engine(config.store.url, must_exist=not migrate)
    if migrate:
        store_engine.upgrade(engine)
    else:
        store_engine.require_current(engine)
    return Repository(engine)


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
) -> Pipeline:
    validate(config)
    transport = (
        transport if transport is not None else plugin(TRANSPORTS, config.transport.kind, "transport.kind")(config)
    )
    if actuator is None:
        actuator = plugin(ACTUATORS, config.actuator.kind, "actuator.kind")(config, clock)
    breaker = Breaker(repo, config.policy.breaker, metrics)
    policy = PolicyEngine(repo, config.policy, breaker, metrics)
    return Pipeline(
        transport=transport,
        repo=repo,
        metrics=metrics,
        detector=Detector(transport, repo, config.detector, metrics, clock),
        controller=Controller(transport, repo, policy, config.policy, metrics, clock),
        actuator=ActuatorService(transport, actuator, metrics, clock),
    )


def serve_metrics(config: Config, metrics: Metrics) -> None:
    if config.metrics.listen:
        host, _, port = config.metrics.listen.rpartition(":")
        start_http_server(int(port), addr=host, registry=metrics.registry)
        log.info("serving metrics on http://%s/metrics", config.metrics.listen)


def run(
    config: Config,
    stop: threading.Event,
    max_cycles: int | None = None,
    on_cycle: Callable[[int, Pipeline], None] | None = None,
) -> Pipeline:
    """Run the whole pipeline on this machine until ``stop`` is set (or ``max_cycles`` intervals passed)."""
    clock = SystemClock()
    metrics = Metrics()
    repo = open_repository(config, migrate=True)
    pipeline = build_pipeline(config, clock, metrics, repo)
    collectors = [plugin(COLLECTORS, name, "agent.collectors")() for name in config.agent.collectors]
    agent = Agent(config.node_name(), collectors[0] if collectors else None, pipeline.transport, metrics, clock)
    serve_metrics(config, metrics)
    cycle = 0
    while not stop.is_set():
        agent.publish_once()
        pipeline.pump()
        cycle += 1
        if on_cycle is not None:
            on_cycle(cycle, pipeline)
        if max_cycles is not None and cycle >= max_cycles:
            break
        stop.wait(config.agent.interval_s)
    pipeline.transport.close()
    return pipeline
