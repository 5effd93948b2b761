"""The controller's threads beside its loop: store retention (``sentinel.store.retention``) every
``store.retention.interval_s``, and the drain watch (``sentinel.controller.drain_watch``), each on a thread of
its own so a long first prune or a slow scheduler never holds up the loop."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sentinel.actuator import Scheduler
from sentinel.clock import Clock
from sentinel.config import Config, RetentionConfig
from sentinel.controller.drain_watch import DrainWatch
from sentinel.obs.metrics import ControllerMetrics
from sentinel.store.repository import Repository
from sentinel.store.retention import Cutoffs, prune

log = logging.getLogger(__name__)
DAY_S = 86_400.0


def cutoffs(config: RetentionConfig, now: float) -> Cutoffs:
    def before(days: float) -> float | None:
        return now - days * DAY_S if days > 0 else None

    return Cutoffs(resolved_incidents=before(config.resolved_incidents_days), findings=before(config.findings_days),
                   journal=before(config.journal_days), load_bins=before(config.load_bins_days),
                   forecasts=before(config.forecasts_days), nodes=before(config.nodes_days),
                   queue_jobs=before(config.queue_jobs_days))


def prune_store(repo: Repository, config: RetentionConfig, clock: Clock,
                metrics: ControllerMetrics | None) -> dict[str, int]:
    now = clock.now()
    counts = prune(repo.engine, cutoffs(config, now), now)
    if metrics is not None:
        for table, n in counts.items():
            metrics.pruned_rows.labels(table).inc(n)
    if counts:
        log.info("retention pruned %s", ", ".join(f"{n} {table}" for table, n in sorted(counts.items())))
    return counts


def start_pruner(repo: Repository, config: RetentionConfig, clock: Clock, metrics: ControllerMetrics,
                 stop: threading.Event) -> threading.Thread:
    def loop() -> None:
        while not stop.wait(config.interval_s):
            try:
                prune_store(repo, config, clock, metrics)
            except Exception:  # the store away for a moment: the next round tries again
                log.exception("retention failed; retrying in %.0f s", config.interval_s)

    thread = threading.Thread(target=loop, name="retention", daemon=True)
    thread.start()
    return thread


def start_background(config: Config, repo: Repository, clock: Clock, metrics: ControllerMetrics, stop: threading.Event,
                     scheduler: Callable[[], Scheduler]) -> None:
    """Retention always; the drain watch (which also stores the scheduler's node list) when a scheduler is driven
    (a dry run drains nothing)."""
    start_pruner(repo, config.store.retention, clock, metrics, stop)
    if config.actuator.kind != "dryrun":
        DrainWatch(repo, scheduler(), clock, metrics, config.policy.drain_watch_s).start(stop)
