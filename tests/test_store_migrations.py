"""The schema comes only from Alembic, and `upgrade head` yields exactly the models' schema."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text

from sentinel.errors import StoreError
from sentinel.events import (
    ActionKind,
    Decision,
    Finding,
    FindingClass,
    Incident,
    IncidentStatus,
    Mode,
    Recommendation,
    Severity,
)
from sentinel.store import schema
from sentinel.store.engine import current_revision, head_revision, make_engine, require_current, upgrade
from sentinel.store.repository import Repository
from tests.pg import empty_postgres


def _schema_diff(engine: Engine) -> list[object]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, schema.metadata))


def test_upgrade_head_on_sqlite_matches_the_models_exactly(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    assert _schema_diff(engine) == []
    assert set(inspect(engine).get_table_names()) == set(schema.metadata.tables) | {"alembic_version"}


@pytest.mark.postgres
def test_upgrade_head_on_postgres_matches_the_models_exactly(pg_url: str) -> None:
    engine = empty_postgres(pg_url)
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    assert _schema_diff(engine) == []
    upgrade(engine)  # a second upgrade is a no-op
    assert current_revision(engine) == head_revision()


def test_sqlite_store_runs_in_wal_mode(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1


def test_a_store_that_was_never_migrated_is_refused_with_the_fix(sqlite_url: str) -> None:
    with pytest.raises(StoreError, match="sentinel db upgrade"):
        require_current(make_engine(sqlite_url))


def test_readers_do_not_create_a_missing_sqlite_file(tmp_path) -> None:
    with pytest.raises(StoreError, match="no store at"):
        make_engine(f"sqlite:///{tmp_path / 'absent.db'}", must_exist=True)
    assert not (tmp_path / "absent.db").exists()


def _records(node: str = "gpu-node-001") -> tuple[Incident, Finding, Decision]:
    finding = Finding(id=f"xid-catalog:{node}:gpu3:1000", node=node, ts=1001.0, observed_ts=1000.0,
                      kind=FindingClass.GPU_XID, rule="xid-catalog", severity=Severity.FATAL,
                      recommendation=Recommendation.DRAIN, confidence=1.0, summary="Xid 79", gpu_index=3,
                      evidence={"xid": 79})
    incident = Incident(id=f"inc-{node}-1000", node=node, opened_ts=1000.0, updated_ts=1001.0,
                        status=IncidentStatus.OPEN, severity=Severity.FATAL, kind=FindingClass.GPU_XID,
                        summary="Xid 79", finding_ids=[finding.id])
    decision = Decision(id=f"{incident.id}:drain_requeue", incident_id=incident.id, node=node, ts=1001.0,
                        action=ActionKind.DRAIN_REQUEUE, mode=Mode.EXECUTE, reason="Xid 79")
    return incident, finding, decision


def _exercise_idempotent_writes(repo: Repository) -> None:
    incident, finding, decision = _records()
    repo.ensure_node(incident.node, 999.0)
    repo.save_incident(incident)
    assert repo.add_finding(finding, incident.id) is True
    assert repo.add_finding(finding, incident.id) is False  # a redelivery stores nothing new
    assert repo.add_decision(decision) is True
    assert repo.add_decision(decision) is False
    assert repo.last_decision_action(incident.id) is ActionKind.DRAIN_REQUEUE
    stored = repo.open_incident(incident.node)
    assert stored is not None and stored.finding_ids == [finding.id]
    assert repo.counts()["findings"] == 1 and repo.counts()["decisions"] == 1


def test_writes_keyed_by_record_id_are_idempotent_on_sqlite(repo: Repository) -> None:
    _exercise_idempotent_writes(repo)  # asserts each repeated write stores nothing new
    assert repo.counts()["incidents"] == 1


@pytest.mark.postgres
def test_writes_keyed_by_record_id_are_idempotent_on_postgres(pg_url: str) -> None:
    engine = empty_postgres(pg_url)
    upgrade(engine)
    repo = Repository(engine)
    _exercise_idempotent_writes(repo)  # asserts each repeated write stores nothing new
    assert repo.counts()["incidents"] == 1


def test_a_store_url_in_a_log_line_never_shows_its_password() -> None:
    from sentinel.store.engine import redacted

    assert redacted("postgresql+psycopg://sentinel:s3cret@db:5432/sentinel") == \
        "postgresql+psycopg://sentinel:***@db:5432/sentinel"
    assert redacted("sqlite:///sentinel.db") == "sqlite:///sentinel.db"
