"""Alembic environment: runs against the engine Sentinel hands over (``config.attributes['engine']``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from sentinel.store.schema import metadata

config = context.config


def run() -> None:
    engine = config.attributes.get("engine")
    if engine is None:
        url = config.get_main_option("sqlalchemy.url")
        if not url:
            raise RuntimeError("no engine and no sqlalchemy.url given to Alembic")
        engine = create_engine(url)
    with engine.begin() as connection:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported; run `sentinel db upgrade`")
run()
