"""A command the actuator has accepted is under way: past its expiry it still holds its node out of service
(the breaker counts it, no second command is decided for the node) until its result arrives. Only a command no
actuator accepted in time expires. On the real store, SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from sentinel.events import (
    ActionKind,
    ActionResult,
    Command,
    Decision,
    FindingClass,
    Incident,
    IncidentStatus,
    Mode,
    Severity,
    Step,
    StepStatus,
)
from sentinel.store.engine import upgrade
from sentinel.store.journal import StoreJournal
from sentinel.store.repository import Repository
from tests.pg import empty_postgres

T0 = 1_700_000_000.0


def _command(repo: Repository, node: str) -> Command:
    """A drain decided for ``node`` at T0 and put in the outbox, as the controller does."""
    incident = Incident(id=f"inc-{node}", node=node, opened_ts=T0, updated_ts=T0, status=IncidentStatus.OPEN,
                        severity=Severity.FATAL, kind=FindingClass.GPU_XID, summary="Xid 79", finding_ids=[])
    repo.ensure_node(node, T0)
    repo.save_incident(incident)
    repo.add_decision(Decision(id=f"inc-{node}:drain_requeue", incident_id=incident.id, node=node, ts=T0,
                               action=ActionKind.DRAIN_REQUEUE, mode=Mode.EXECUTE, reason="Xid 79"))
    command = Command(id=f"inc-{node}:drain_requeue:cmd", decision_id=f"inc-{node}:drain_requeue",
                   incident_id=f"inc-{node}", node=node, action=ActionKind.DRAIN_REQUEUE, ts=T0,
                   expires_ts=T0 + 300, drain_reason=f"sentinel: inc-{node} test")
    repo.add_command(command)
    return command


def _status(repo: Repository) -> dict[str, str]:
    return {row["node"]: row["status"] for row in repo.table("commands")}


def test_a_command_under_way_does_not_expire_and_still_holds_its_node(repo: Repository) -> None:
    _assert_under_way(repo)


@pytest.mark.postgres
def test_a_command_under_way_does_not_expire_on_postgres(pg_url: str) -> None:
    engine = empty_postgres(pg_url)
    upgrade(engine)
    _assert_under_way(Repository(engine))


def _assert_under_way(repo: Repository) -> None:
    started, lost = _command(repo, "gpu-node-001"), _command(repo, "gpu-node-002")
    StoreJournal(repo.engine).accept(started, T0 + 5, b"")  # the actuator took it; slurmctld then stopped answering

    assert repo.expire_commands(T0 + 400) == [lost.id]
    assert _status(repo) == {"gpu-node-001": "pending", "gpu-node-002": "expired"}
    with repo.unit() as unit:
        assert unit.held_out() == 1  # the breaker still counts the node being drained
        assert unit.pending_command("gpu-node-001") == "inc-gpu-node-001"  # no second command for it
    assert repo.commands_to_send(T0 + 400, resend_after_s=30.0) == []  # and nothing is sent again


def test_a_finished_command_whose_result_was_lost_expires(repo: Repository) -> None:
    command = _command(repo, "gpu-node-003")
    journal = StoreJournal(repo.engine)
    journal.accept(command, T0 + 5, b"")
    journal.record(ActionResult(id=f"{command.id}:verify", command_id=command.id, incident_id=command.incident_id,
                                node=command.node, ts=T0 + 60,
                                step=Step.VERIFY, status=StepStatus.OK, detail="drained"), T0 + 60)
    assert repo.expire_commands(T0 + 400) == [command.id]  # done by the actuator: its node is not held by it
