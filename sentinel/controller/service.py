"""The controller service: findings -> incidents -> policy -> decisions -> commands; results -> store.

Effects are exactly once: everything a finding causes (the incident, the finding, the decisions, the breaker's
next state and the outgoing command) is written in one transaction that holds the breaker's lock, before the
offset is committed; the command waits in the outbox (``commands``, status pending) and is published after the
commit, and again every ``policy.command_resend_s`` until its final result comes back. A redelivered finding
meets its incident and decision already there and produces nothing new; a command lost on the way, or left
half-done by an actuator that died, is re-sent and resumed (the actuator keeps a journal by command id).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextlib import AbstractContextManager
from functools import partial
from typing import Protocol

import msgspec

from sentinel import codec
from sentinel.actuator import LEMON_MARK, OWNED_REASON_PREFIX
from sentinel.actuator.sealed import Opener, RecordRefused, Sealer
from sentinel.actuator.signing import CommandSigner, SigningKey
from sentinel.alerts import grading
from sentinel.clock import Clock
from sentinel.config import PolicyConfig
from sentinel.config.alerts import AlertsConfig
from sentinel.errors import CodecError
from sentinel.events import (
    ActionResult,
    Command,
    Decision,
    Finding,
    Incident,
    IncidentStatus,
    Mode,
    Severity,
    Step,
    StepStatus,
)
from sentinel.obs.metrics import ControllerMetrics
from sentinel.policy import engine, incidents, plans
from sentinel.policy.breaker import BreakerState
from sentinel.policy.guards import Guard
from sentinel.store.unit import Unit
from sentinel.transport import COMMANDS, FINDINGS, RESULTS, Message, Transport
from sentinel.transport.deadletter import send_dead_letter
from sentinel.transport.service import ConsumingService

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 60.0
GAUGE_REFRESH_S = 15.0  # store-backed gauges (incidents, nodes, breaker) are re-read at most this often
SILENT_AFTER_S = 180.0  # a node with no sample stored for this long is silent (the detector stores every 30 s)
RELAY_INTERVAL_S = 1.0  # the outbox is looked at least this often (at once after a new command)


class ControllerStore(Protocol):
    """What the controller needs of the store (``Repository`` provides it)."""

    def unit(self) -> AbstractContextManager[Unit]: ...
    def resolve_quiet_incidents(self, quiet_since_ts: float, now: float) -> int: ...
    def incident_counts(self, since_ts: float, node: str | None = None) -> dict[str, int]: ...
    def open_incident_count(self) -> int: ...
    def open_alerts(self) -> dict[str, str]: ...
    def node_states(self, silent_before_ts: float) -> dict[str, int]: ...
    def load_breaker(self) -> BreakerState | None: ...
    def command_target(self, command_id: str) -> tuple[str, str] | None: ...
    def add_results(self, results: Iterable[ActionResult], command_status: str | None = None) -> int: ...
    def open_incident(self, node: str) -> Incident | None: ...
    def save_incident(self, incident: Incident) -> None: ...
    def set_node_drained(self, node: str, incident_id: str | None) -> None: ...
    def expire_commands(self, now: float) -> list[str]: ...
    def commands_to_send(self, now: float, resend_after_s: float,
                         limit: int = 100) -> list[tuple[Command, float | None, bytes]]: ...
    def mark_sent(self, command_id: str, now: float) -> None: ...
    def refuse_command(self, command_id: str) -> None: ...


class Controller(ConsumingService):
    metrics: ControllerMetrics

    def __init__(
        self,
        transport: Transport,
        repo: ControllerStore,
        config: PolicyConfig,
        metrics: ControllerMetrics,
        clock: Clock,
        *,
        signer: CommandSigner,
        group: str = "sentinel-controller",
        guards: dict[str, Guard] | None = None,
        alerts: AlertsConfig | None = None,
        trusted: Iterable[SigningKey] | None = None,
    ) -> None:
        """``signer`` comes from the composition root (``daemon.command_signing``): the process's ephemeral key in
        the one-process pipeline, ``security.key_file`` for the separate services. Findings and results are acted
        on only when sealed (``sentinel.actuator.sealed``) with one of the ``trusted`` keys (default: the signer's)."""
        self.transport = transport
        self.signer = signer
        keys = list(trusted) if trusted is not None else [signer.key]
        self.openers: dict[str, Opener[Finding] | Opener[ActionResult]] = {
            FINDINGS: Opener(keys, Finding), RESULTS: Opener(keys, ActionResult)}
        # Each outbox row carries the controller's seal of its command: one written into the store by hand is
        # never signed or sent (issue 38, item 4).
        self.row_sealer = Sealer(signer.key, Command)
        self.row_opener = Opener(keys, Command)
        self._last_sweep_ts = float("-inf")
        self._relay_ts = float("-inf")
        self._fresh = False  # commands were added to the outbox since the last relay
        self.repo = repo
        self.config = config
        self.guards = guards
        self.alerts = alerts if alerts is not None else AlertsConfig()
        self.metrics = metrics
        self.clock = clock
        self.group = group
        # The scheduler node gate (issue 38): set by the services that drive a scheduler and store its node list
        # (``daemon.start_background``); then a node the list does not hold is never acted on, none while it is empty.
        self.gate_nodes = False
        self.consumer = transport.consumer(group, [FINDINGS, RESULTS])
        self._refreshed_ts = -1e18

    def before_poll(self) -> None:
        self._sweep(self.clock.now())

    def handle(self, messages: list[Message]) -> None:
        """Each finding or result in its own store transaction (``on_finding``, ``on_result``)."""
        for message in messages:
            self._handle(message)

    def after_commit(self, messages: list[Message]) -> None:
        """The round's decisions are committed: refresh the gauges, then publish what waits in the outbox; a
        failed publish raises ``TransportError`` and the command stays in the outbox for the next round."""
        now = self.clock.now()
        if messages or now - self._refreshed_ts >= GAUGE_REFRESH_S:
            self.refresh_gauges(now)
        self.relay(now)

    def relay(self, now: float) -> int:
        """Publish outbox commands not sent yet, or sent ``policy.command_resend_s`` ago without a final result
        (each sealed afresh: a new nonce); mark expired ones. Runs at once after new decisions, else once per
        ``RELAY_INTERVAL_S``. Returns how many were published."""
        if not self._fresh and now - self._relay_ts < RELAY_INTERVAL_S:
            return 0
        self._relay_ts, self._fresh = now, False
        expired = self.repo.expire_commands(now)
        if expired:
            self.metrics.commands_expired.inc(len(expired))
            log.error("%d command(s) expired before the actuator carried them out: %s", len(expired), expired)
        sent = 0
        for command, sent_ts, seal in self.repo.commands_to_send(now, self.config.command_resend_s):
            if not self._sealed_by_us(command, seal):
                continue
            self._fresh = True  # until it is marked sent, a failure below leaves it due
            self.transport.publish(COMMANDS, command.node, codec.encode(self.signer.seal(command)))
            self.repo.mark_sent(command.id, now)
            self.metrics.messages_published.labels(COMMANDS).inc()
            if sent_ts is not None:
                self.metrics.commands_resent.inc()
                log.warning("command %s on %s re-sent: no final result %.0f s after it was sent", command.id,
                            command.node, now - sent_ts)
            sent += 1
        self._fresh = False
        return sent

    def _sealed_by_us(self, command: Command, seal: bytes) -> bool:
        """Whether the outbox row ``command`` is the one this controller (or one holding its key) decided; else
        it is refused (status ``refused``, ``sentinel_records_refused_total{topic="commands"}``), never signed."""
        try:
            if not seal:
                raise RecordRefused("unsealed", "outbox row without the controller's seal (not written by it)")
            if self.row_opener.open(seal) != command:
                raise RecordRefused("tampered", "outbox row differs from the command the controller sealed")
        except CodecError as exc:
            reason = exc.refusal if isinstance(exc, RecordRefused) else "malformed"
            self.metrics.records_refused.labels("commands", reason).inc()
            log.error("refused outbox command %s on %s: %s; not sent", command.id, command.node, exc.reason)
            self.repo.refuse_command(command.id)
            return False
        return True

    def _sweep(self, now: float) -> None:
        """Hysteresis on the way down: resolve incidents quiet for ``policy.hysteresis.quiet_s`` (at most once a
        minute), and refresh the lemon gauge."""
        if now - self._last_sweep_ts < SWEEP_INTERVAL_S:
            return
        self._last_sweep_ts = now
        resolved = self.repo.resolve_quiet_incidents(now - self.config.hysteresis.quiet_s, now)
        if resolved:
            log.info("resolved %d incident(s) quiet for %.0f s", resolved, self.config.hysteresis.quiet_s)
        lemon = self.config.lemon
        counts = self.repo.incident_counts(now - lemon.window_s)
        self.metrics.lemon_nodes.set(sum(1 for c in counts.values() if c >= lemon.min_incidents))

    def refresh_gauges(self, now: float) -> None:
        """Set the gauges whose truth is in the store (so a restarted controller shows an open breaker at once)."""
        self._refreshed_ts = now
        self.metrics.open_incidents.set(self.repo.open_incident_count())
        self.metrics.set_node_alerts(self.repo.open_alerts())
        for state, count in self.repo.node_states(now - SILENT_AFTER_S).items():
            self.metrics.nodes.labels(state).set(count)
        breaker = self.repo.load_breaker()
        self.metrics.breaker_open.set(1 if breaker is not None and breaker.is_open else 0)

    def _handle(self, message: Message) -> None:
        now = self.clock.now()
        opener = self.openers.get(message.topic)
        try:
            if opener is None:
                raise CodecError(f"the controller reads no records from {message.topic}")
            record = opener.open(message.value)
        except CodecError as exc:  # a RecordRefused too: unsealed, forged, sealed with a key we do not hold
            if isinstance(exc, RecordRefused):
                self.metrics.records_refused.labels(message.topic, exc.refusal).inc()
                log.warning("refused a record on %s: %s", message.topic, exc.reason)
            send_dead_letter(self.transport, message, exc.reason, self.metrics, now)
            return
        if isinstance(record, Finding):
            self.survive(message, partial(self.on_finding, record, now))
        elif isinstance(record, ActionResult):
            target = self.repo.command_target(record.command_id)
            if target != (record.node, record.incident_id):
                # A result the store cannot place is no effect of ours: kept with its reason, never a crash loop.
                why = ("result for an unknown command" if target is None else
                       f"result does not match its command (node {record.node!r}, incident {record.incident_id!r})")
                send_dead_letter(self.transport, message, f"{why}: {record.command_id}", self.metrics, now)
                return
            self.survive(message, partial(self.on_result, record, now))

    def on_finding(self, finding: Finding, now: float) -> Decision | None:
        with self.repo.unit() as unit:
            breaker = unit.lock_breaker()  # first: every controller on this store judges in turn
            unit.ensure_node(finding.node, finding.observed_ts)
            incident = unit.open_incident(finding.node)
            if incident is None and finding.severity is Severity.INFO:
                unit.add_finding(finding, None)  # recorded for the operator, no incident: nothing to track
                return None
            incident = incidents.merge(finding, incident, now)
            unit.save_incident(incident)
            new_finding = unit.add_finding(finding, incident.id)
            alerted = self._grade(unit, incident, finding, now) if incident.alert_ts is None and new_finding else None
            if alerted is not None:
                incident = alerted
                unit.save_incident(incident)
            facts = self._facts(unit, incident, breaker)
            request = engine.operator_request(incident, finding, facts, self.config, now)
            new_request = request is not None and unit.add_decision(request)
            judgement = engine.decide(incident, finding, facts, self.config, now, self.guards)
            decision = judgement.decision
            if judgement.breaker is not None:
                unit.write_breaker(judgement.breaker)
            command = None
            if decision is not None:
                unit.add_decision(decision)
                if decision.mode is Mode.EXECUTE and plans.is_disruptive(decision.action):
                    command = self._command(decision, incident, now, engine.is_lemon(facts, self.config))
                    unit.add_command(command, self.row_sealer.seal(command))
        # committed: count, log, and let the outbox publish
        if alerted is not None:
            self._count_alert(alerted)
        if request is not None and new_request:
            self.metrics.decisions.labels(request.action.value, request.mode.value).inc()
            log.info("operator queue: %s on %s (%s)", request.action, request.node, request.reason)
        for name in judgement.held_back:
            self.metrics.guard_blocks.labels(name).inc()
        if "breaker" in judgement.held_back or (judgement.breaker is not None and judgement.breaker.is_open):
            self.metrics.breaker_open.set(1)
        elif judgement.breaker is not None:
            self.metrics.breaker_open.set(0)
        if decision is None:
            return None
        self.metrics.decisions.labels(decision.action.value, decision.mode.value).inc()
        log.info("decision %s on %s: %s/%s", decision.id, decision.node, decision.action, decision.mode)
        if command is not None:
            self.metrics.commands_issued.labels(command.action.value).inc()
            self._fresh = True
        return decision

    def _grade(self, unit: Unit, incident: Incident, finding: Finding, now: float) -> Incident | None:
        """The incident as an operator-facing alert when ``finding`` grades it so (sentinel.alerts.grading);
        held (shown, not sent again) when the node's previous alert ended within ``alerts.flap_hold_s``."""
        alerts = self.alerts
        window = max(alerts.corroborate_s, alerts.repeat_window_s)
        reason = grading.grade(finding, unit.node_findings(finding.node, finding.observed_ts - window), alerts)
        if reason is None:
            return None
        ended = unit.last_alert_end(finding.node, now)
        held = ended is not None and now - ended < alerts.flap_hold_s
        if held and ended is not None:
            reason += f" | held: the node's previous alert ended {now - ended:.0f} s ago (flapping)"
        return msgspec.structs.replace(incident, alert_ts=now, alert_reason=reason[:4096], alert_held=held)

    def _count_alert(self, incident: Incident) -> None:
        if incident.alert_held:
            self.metrics.alerts_held.inc()
            log.info("alert held on %s (flapping): %s", incident.node, incident.alert_reason)
            return
        self.metrics.alerts.labels(incident.kind.value).inc()
        log.info("alert on %s: %s (%s)", incident.node, incident.summary, incident.alert_reason)

    def _facts(self, unit: Unit, incident: Incident, breaker: BreakerState) -> engine.Facts:
        node = incident.node
        since = incident.opened_ts - self.config.lemon.window_s
        return engine.Facts(
            fleet_size=max(unit.node_count(), 1),  # the scheduler's nodes once listed (issue 19)
            prior_action=unit.last_decision_action(incident.id),
            last_executed_ts=unit.last_executed_ts(node),
            drained_by=unit.drained_by(node),
            command_in_flight=unit.pending_command(node),
            recent_incidents=unit.incident_counts(since, node).get(node, 0),
            breaker=breaker,
            held_out=unit.held_out(),
            managed=unit.is_managed(node) if self.gate_nodes else None,
        )

    def _command(self, decision: Decision, incident: Incident, now: float, lemon: bool) -> Command:
        mark = f" {LEMON_MARK}" if lemon else ""  # auto-resume leaves a lemon's drain to a person
        reason = f"{OWNED_REASON_PREFIX} {incident.id}{mark} {incident.summary}"[:200]
        return Command(id=f"{decision.id}:cmd", decision_id=decision.id, incident_id=incident.id,
                       node=decision.node, action=decision.action, ts=now,
                       expires_ts=now + self.config.command_ttl_s, drain_reason=reason)

    def on_result(self, result: ActionResult, now: float) -> None:
        final = result.step is Step.VERIFY
        status = None
        if final:
            status = "done" if result.status in (StepStatus.OK, StepStatus.DRY_RUN) else "failed"
        if self.repo.add_results([result], command_status=status) and final:  # a redelivered result counts once
            self.metrics.commands.labels(result.status.value).inc()
        if final and result.status is StepStatus.OK:
            incident_id = result.incident_id
            incident = self.repo.open_incident(result.node)
            if incident is not None and incident.id == incident_id:
                self.repo.save_incident(
                    msgspec.structs.replace(incident, updated_ts=now, status=IncidentStatus.MITIGATED)
                )
            self.repo.set_node_drained(result.node, incident_id)
