"""Store retention (``sentinel.store.retention``) every ``store.retention.interval_s`` on a thread of its own
beside the controller's loop, so a long first prune never holds it up (the composition root starts it, with the
drain watch, ``sentinel.controller.drain_watch``, in ``daemon.start_background``)."""

from __future__ import annotations

import logging
import threading

from sentinel.clock import Clock
from sentinel.config import RetentionConfig
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
