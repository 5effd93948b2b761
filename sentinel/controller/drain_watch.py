"""The store's drained nodes, and the fleet size, kept true to the scheduler.

A node Sentinel drained can come back without Sentinel: ``sentinel check --resume`` after a repair, an operator's
``scontrol update state=resume`` or ``kubectl uncordon``. Left alone, the store would still count it held out (the
breaker's fraction) and the "already drained" guard would hold back the drain of its next fault. Every
``policy.drain_watch_s`` the watch asks the scheduler about each node the store marks drained by Sentinel; one that
is no longer drained with Sentinel's reason has its mark cleared and its incident resolved
(``sentinel_nodes_returned_total``). On the same pass it stores the list of nodes the scheduler manages: the
breaker's fraction is then taken of the nodes seen among them, not of every name ever seen on the telemetry topic
(which anyone who can produce to it could inflate, issue 19), and the detector dead-letters samples from names the
scheduler does not manage.
"""

from __future__ import annotations

import logging
import threading

from sentinel.actuator import OWNED_REASON_PREFIX, NodeLister, Scheduler
from sentinel.clock import Clock
from sentinel.errors import ActuatorError
from sentinel.obs.metrics import ControllerMetrics
from sentinel.store.repository import Repository

log = logging.getLogger(__name__)


class DrainWatch:
    def __init__(self, repo: Repository, scheduler: Scheduler, clock: Clock, metrics: ControllerMetrics,
                 interval_s: float) -> None:
        self.repo, self.scheduler, self.clock, self.metrics = repo, scheduler, clock, metrics
        self.interval_s = interval_s

    def check(self) -> list[str]:
        """One pass: the nodes found back in service (their marks cleared, incidents resolved)."""
        if isinstance(self.scheduler, NodeLister):
            try:
                names = self.scheduler.node_names()
            except ActuatorError as exc:  # the last known list stays in force
                log.warning("drain watch: cannot list the scheduler's nodes: %s", exc)
            else:  # the detector accepts only these; the breaker counts the nodes seen among them
                self.repo.set_scheduler_nodes(names, self.clock.now())
        returned = []
        for node, incident_id in self.repo.drained_nodes():
            try:
                reason = self.scheduler.drain_reason(node)
            except ActuatorError as exc:  # slurmctld away, a node removed from the cluster: ask again next pass
                log.warning("drain watch: %s: %s", node, exc)
                continue
            if reason is not None and reason.startswith(OWNED_REASON_PREFIX):
                continue
            self.repo.node_returned(node, incident_id, self.clock.now())
            self.metrics.nodes_returned.inc()
            log.info("%s is back in service without Sentinel (now: %s); incident %s resolved", node,
                     reason or "not drained", incident_id)
            returned.append(node)
        return returned

    def start(self, stop: threading.Event, first_wait_s: float = 0.0) -> threading.Thread:
        """Watch on a thread of its own (a slow scheduler never holds up the controller's loop), after
        ``first_wait_s`` and then every ``interval_s``."""

        def loop() -> None:
            wait = first_wait_s
            while not stop.wait(wait):
                wait = self.interval_s
                try:
                    self.check()
                except Exception:  # the store away for a moment: the next pass tries again
                    log.exception("drain watch failed; retrying in %.0f s", self.interval_s)

        thread = threading.Thread(target=loop, name="drain-watch", daemon=True)
        thread.start()
        return thread
