"""Fresh stores for benchmarks that run the real services: a SQLite file, or a schema of its own in PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


def fresh_store(url: str, work: Path, prefix: str = "sentinel_bench") -> tuple[str, Callable[[], None]]:
    """A new, migrated store: a SQLite file in ``work``, or a new schema in the PostgreSQL database of ``url``
    (every connection's search_path points at it; dropped afterwards)."""
    from sentinel.store.engine import make_engine, upgrade

    if url.startswith("sqlite"):
        fresh = f"sqlite:///{work / 'sentinel.db'}"
        upgrade(make_engine(fresh))
        return fresh, lambda: None
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {name}"))
    parsed = make_url(url)
    fresh = parsed.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(hide_password=False)
    engine = make_engine(fresh)
    upgrade(engine)
    engine.dispose()

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))
        admin.dispose()

    return fresh, drop
