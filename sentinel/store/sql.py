"""Dialect-aware insert-if-absent and upsert (SQLite and PostgreSQL), with statements built once."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table, insert
from sqlalchemy.dialects import postgresql, sqlite

_upserts: dict[tuple[str, str, tuple[str, ...]], Any] = {}


def insert_stmt(conn: Connection, table: Table):  # type: ignore[no-untyped-def]
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    if conn.dialect.name == "sqlite":
        return sqlite.insert(table)
    return insert(table)


def insert_ignore(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> int:
    """Insert rows whose key is new; return how many were inserted (0 when all existed)."""
    stmt = insert_stmt(conn, table).on_conflict_do_nothing()
    if len(rows) == 1:
        # RETURNING, not rowcount: psycopg 3 reports -1 for INSERT .. ON CONFLICT through SQLAlchemy.
        key = list(table.primary_key.columns)[0]
        return len(conn.execute(stmt.values(rows[0]).returning(key)).all())
    conn.execute(stmt, rows)
    return len(rows)  # executemany gives no reliable rowcount; callers of batches ignore it


def upsert(
    conn: Connection, table: Table, rows: dict[str, Any] | list[dict[str, Any]], keys: list[str], update_cols: list[str]
) -> None:
    """Insert rows, or update ``update_cols`` where the key exists (one statement, executemany)."""
    rows = [rows] if isinstance(rows, dict) else rows
    if not rows:
        return
    cache_key = (conn.dialect.name, table.name, tuple(update_cols))
    stmt = _upserts.get(cache_key)
    if stmt is None:
        base = insert_stmt(conn, table)
        stmt = _upserts[cache_key] = base.on_conflict_do_update(
            index_elements=keys, set_={c: base.excluded[c] for c in update_cols}
        )
    conn.execute(stmt, rows)
