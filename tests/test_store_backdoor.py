"""Write access to the store is not the key (issue 38, item 4): a command row put into the controller's outbox or
the actuator's journal by hand is never signed, sent or carried out. The journal keeps the signed envelope the
actuator received and re-verifies it on every resume; each outbox row carries the controller's seal.

Real SQLite store, the real controller and actuator service; the scheduler is the simulator's."""

from __future__ import annotations

import msgspec
from sqlalchemy import insert, update

from sentinel import codec
from sentinel.events import (
    ActionKind,
    Command,
    Decision,
    FindingClass,
    Incident,
    IncidentStatus,
    Mode,
    Severity,
    SignedCommand,
)
from sentinel.store import schema as s
from sentinel.store.journal import StoreJournal
from sentinel.store.repository import Repository
from sentinel.transport import COMMANDS
from tests.test_effects import Rig


def _forged(rig: Rig, node: str) -> Command:
    now = rig.clock.now()
    return Command(id=f"forged-{node}:cmd", decision_id=f"forged-{node}", incident_id=f"forged-{node}", node=node,
                   action=ActionKind.DRAIN_REQUEUE, ts=now, expires_ts=now + 300,
                   drain_reason=f"sentinel: forged-{node} healthy node")


def _refused(metrics: object, name: str, labels: dict[str, str]) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0  # type: ignore[attr-defined]


def test_a_command_inserted_into_the_journal_by_hand_is_never_carried_out(repo: Repository) -> None:
    rig = Rig(repo)
    command = _forged(rig, "gpu-node-002")
    with repo.engine.begin() as conn:  # what someone with the store's password does, bypassing the broker
        conn.execute(insert(s.actuator_commands).values(
            command_id=command.id, node=command.node, payload=codec.encode(command), expires_ts=command.expires_ts,
            accepted_ts=rig.clock.now(), finished_ts=None, owner=None, lease_until_ts=None))
    rig.actuator = rig.new_actuator()  # a restart resumes what the journal holds unfinished
    rig.pump()
    assert rig.scheduler.drain_reason("gpu-node-002") is None
    assert rig.scheduler.calls["drain"] == 0
    assert _refused(rig.actuator.metrics, "sentinel_commands_rejected_total", {"reason": "unsigned"}) == 1
    assert StoreJournal(repo.engine).finished(command.id)  # refused once, recorded, not retried every 30 s
    assert StoreJournal(repo.engine).unfinished(rig.clock.now()) == []


def test_a_journal_entry_edited_by_hand_is_refused_on_resume(repo: Repository) -> None:
    rig = Rig(repo)
    rig.scheduler.fail_on = "drain"  # the genuine command is interrupted before it drained anything
    rig.find("gpu-node-004")
    rig.pump(1)
    assert len(StoreJournal(repo.engine).unfinished(rig.clock.now())) == 1
    with repo.engine.begin() as conn:  # retarget the genuine, signed entry at a healthy node
        row = conn.execute(s.actuator_commands.select()).mappings().one()
        envelope = codec.decode_as(row["envelope"], SignedCommand)
        moved = msgspec.structs.replace(codec.decode_as(envelope.payload, Command), node="gpu-node-009")
        forged = msgspec.structs.replace(envelope, payload=codec.encode(moved))
        conn.execute(update(s.actuator_commands).values(node="gpu-node-009", payload=codec.encode(moved),
                                                        envelope=codec.encode(forged)))
    rig.actuator = rig.new_actuator()
    rig.actuator.step()
    assert rig.scheduler.drain_reason("gpu-node-009") is None and rig.scheduler.calls["drain"] == 0
    assert _refused(rig.actuator.metrics, "sentinel_commands_rejected_total", {"reason": "bad_signature"}) == 1


def test_a_genuine_interrupted_command_still_resumes_from_its_envelope(repo: Repository) -> None:
    rig = Rig(repo)
    rig.scheduler.fail_on = "requeue"
    rig.find("gpu-node-007")
    rig.pump(1)
    rig.clock.advance(400)  # past its expiry: a started command is still finished, not dropped
    rig.actuator = rig.new_actuator()
    rig.actuator.step()
    assert rig.scheduler.jobs_on("gpu-node-007") == [] and rig.scheduler.calls["requeue"] == 1


def test_a_command_inserted_into_the_outbox_by_hand_is_never_signed_or_sent(repo: Repository) -> None:
    rig = Rig(repo)
    command = _forged(rig, "gpu-node-003")
    repo.save_incident(Incident(id=command.incident_id, node=command.node, opened_ts=command.ts,
                                updated_ts=command.ts, status=IncidentStatus.OPEN, severity=Severity.FATAL,
                                kind=FindingClass.GPU_XID, summary="forged", finding_ids=[]))
    repo.add_decision(Decision(id=command.decision_id, incident_id=command.incident_id, node=command.node,
                               ts=command.ts, action=command.action, mode=Mode.EXECUTE, reason="forged"))
    repo.add_command(command)  # a row with no controller seal, as an INSERT by hand would leave it
    spy = rig.transport.consumer("spy", [COMMANDS])
    rig.pump()
    assert spy.poll(10, 0.0) == []
    assert rig.scheduler.drain_reason("gpu-node-003") is None
    assert rig.statuses() == ["refused"]
    assert _refused(rig.controller.metrics, "sentinel_records_refused_total",
                    {"topic": "commands", "reason": "unsealed"}) == 1


def test_an_outbox_row_edited_by_hand_is_refused(repo: Repository) -> None:
    rig = Rig(repo)
    real = rig.controller.relay
    rig.controller.relay = lambda now: 0  # type: ignore[method-assign]  # decided, not published yet
    rig.find("gpu-node-005")
    rig.controller.step()
    with repo.engine.begin() as conn:  # send the stored drain to another node
        conn.execute(update(s.commands).values(node="gpu-node-006", drain_reason="sentinel: x retargeted"))
    rig.controller.relay = real  # type: ignore[method-assign]
    rig.pump()
    assert rig.scheduler.drain_reason("gpu-node-006") is None and rig.scheduler.calls["drain"] == 0
    assert rig.statuses() == ["refused"]
    assert _refused(rig.controller.metrics, "sentinel_records_refused_total",
                    {"topic": "commands", "reason": "tampered"}) == 1
