"""The controller service: findings -> incidents -> policy -> decisions -> commands; results -> store.

Every effect is keyed by a stable id and written before the offset is committed: a redelivered finding finds
its incident and decision already there and produces nothing new.
"""

from __future__ import annotations

import logging

import msgspec

from sentinel import codec
from sentinel.actuator import OWNED_REASON_PREFIX
from sentinel.actuator.signing import CommandSigner, process_key
from sentinel.clock import Clock
from sentinel.config import PolicyConfig
from sentinel.errors import CodecError, TransportError
from sentinel.events import (
    SEVERITY_RANK,
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
from sentinel.metrics import Metrics
from sentinel.policy import plans
from sentinel.policy.engine import PolicyEngine
from sentinel.store.repository import Repository
from sentinel.transport import COMMANDS, FINDINGS, RESULTS, Message, Transport
from sentinel.transport.deadletter import send_dead_letter

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 60.0
GAUGE_REFRESH_S = 15.0  # store-backed gauges (incidents, nodes, breaker) are re-read at most this often
SILENT_AFTER_S = 180.0  # a node with no sample stored for this long is silent (the detector stores every 30 s)


class Controller:
    def __init__(
        self,
        transport: Transport,
        repo: Repository,
        policy: PolicyEngine,
        config: PolicyConfig,
        metrics: Metrics,
        clock: Clock,
        group: str = "sentinel-controller",
        signer: CommandSigner | None = None,
    ) -> None:
        """``signer`` defaults to this process's ephemeral key (the one-process pipeline); the separate services
        pass one built from ``security.key_file``."""
        self.transport = transport
        self.signer = signer or CommandSigner(process_key())
        self._last_sweep_ts = float("-inf")
        self.repo = repo
        self.policy = policy
        self.config = config
        self.metrics = metrics
        self.clock = clock
        self.group = group
        self.consumer = transport.consumer(group, [FINDINGS, RESULTS])
        self._refreshed_ts = -1e18
        # Sealed commands stored but not yet published (the publish failed): sent before anything else, and the
        # batch that decided them is not committed until they are.
        self.unsent: list[tuple[str, bytes]] = []

    def step(self, max_messages: int = 500, timeout_s: float = 0.0) -> int:
        self._sweep(self.clock.now())
        if self.unsent:
            self._publish_unsent()
            self.consumer.commit()
        messages = self.consumer.poll(max_messages, timeout_s)
        self.metrics.set_consumer_lag(self.group, self.consumer.lag())
        for message in messages:
            self.metrics.messages_consumed.labels(message.topic).inc()
            self._handle(message)
        if self.unsent:
            raise TransportError(f"{len(self.unsent)} command(s) not published: kept and sent before the next "
                                 "batch; this batch is not committed until then")
        if messages:
            self.consumer.commit()
        now = self.clock.now()
        if messages or now - self._refreshed_ts >= GAUGE_REFRESH_S:
            self.refresh_gauges(now)
        return len(messages)

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
        for state, count in self.repo.node_states(now - SILENT_AFTER_S).items():
            self.metrics.nodes.labels(state).set(count)
        breaker = self.repo.load_breaker()
        self.metrics.breaker_open.set(1 if breaker is not None and breaker.is_open else 0)

    def _handle(self, message: Message) -> None:
        now = self.clock.now()
        try:
            record = codec.decode_as(message.value, Finding if message.topic == FINDINGS else ActionResult)
        except CodecError as exc:
            send_dead_letter(self.transport, message, exc.reason, self.metrics, now)
            return
        if isinstance(record, Finding):
            self.on_finding(record, now)
        elif isinstance(record, ActionResult):
            self.on_result(record, now)

    def on_finding(self, finding: Finding, now: float) -> Decision | None:
        self.repo.ensure_node(finding.node, finding.observed_ts)
        incident = self.repo.open_incident(finding.node)
        if incident is None and finding.severity is Severity.INFO:
            self.repo.add_finding(finding, None)  # recorded for the operator, no incident: nothing to track
            return None
        incident = self._incident_for(finding, incident, now)
        self.repo.save_incident(incident)
        self.repo.add_finding(finding, incident.id)
        request = self.policy.operator_request(incident, finding, now)
        if request is not None and self.repo.add_decision(request):
            log.info("operator queue: %s on %s (%s)", request.action, request.node, request.reason)
        decision = self.policy.decide(incident, finding, max(self.repo.node_count(), 1), now)
        if decision is None:
            return None
        self.repo.add_decision(decision)
        log.info("decision %s on %s: %s/%s", decision.id, decision.node, decision.action, decision.mode)
        if decision.mode is Mode.EXECUTE and plans.is_disruptive(decision.action):
            self._command(decision, incident, now)
        return decision

    def _incident_for(self, finding: Finding, incident: Incident | None, now: float) -> Incident:
        if incident is None:
            return Incident(
                id=f"inc-{finding.node}-{int(finding.observed_ts)}",
                node=finding.node,
                opened_ts=finding.observed_ts,
                updated_ts=now,
                status=IncidentStatus.OPEN,
                severity=finding.severity,
                kind=finding.kind,
                summary=finding.summary,
                finding_ids=[finding.id],
            )
        worse = SEVERITY_RANK[finding.severity] > SEVERITY_RANK[incident.severity]
        return Incident(
            id=incident.id,
            node=incident.node,
            opened_ts=incident.opened_ts,
            updated_ts=now,
            status=incident.status,
            severity=finding.severity if worse else incident.severity,
            kind=finding.kind if worse else incident.kind,
            summary=finding.summary if worse else incident.summary,
            # A redelivered finding is the same evidence: it must not count twice toward min_findings.
            finding_ids=incident.finding_ids if finding.id in incident.finding_ids else [*incident.finding_ids,
                                                                                         finding.id],
        )

    def _command(self, decision: Decision, incident: Incident, now: float) -> None:
        reason = f"{OWNED_REASON_PREFIX} {incident.id} {incident.summary}"[:200]
        command = Command(
            id=f"{decision.id}:cmd",
            decision_id=decision.id,
            incident_id=incident.id,
            node=decision.node,
            action=decision.action,
            ts=now,
            expires_ts=now + self.config.command_ttl_s,
            drain_reason=reason,
        )
        self.repo.add_command(command)
        self.metrics.commands_issued.labels(command.action.value).inc()
        self.unsent.append((command.node, codec.encode(self.signer.seal(command))))
        try:
            self._publish_unsent()
        except TransportError as exc:  # the rest of the batch is still handled; step() commits nothing
            log.warning("command %s not published (%s): kept, sent before the next batch", command.id, exc)

    def _publish_unsent(self) -> None:
        """Publish the commands waiting in ``unsent``, oldest first; a failure propagates and keeps the rest."""
        while self.unsent:
            node, envelope = self.unsent[0]
            self.transport.publish(COMMANDS, node, envelope)
            self.unsent.pop(0)
            self.metrics.messages_published.labels(COMMANDS).inc()

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
