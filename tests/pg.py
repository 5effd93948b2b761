"""The test PostgreSQL (tests/services.sh) emptied for one test: an empty schema, or a freshly migrated store."""

from __future__ import annotations

from sqlalchemy import Engine, text

from sentinel.store.engine import make_engine, upgrade
from sentinel.store.repository import Repository


def empty_postgres(url: str) -> Engine:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    return engine


def fresh_postgres_store(url: str) -> Repository:
    engine = empty_postgres(url)
    upgrade(engine)
    return Repository(engine)
