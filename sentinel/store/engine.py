"""Engines and migrations: SQLite by default (WAL), PostgreSQL in production; schema only via Alembic."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, NoSuchModuleError, OperationalError

from sentinel.config.urls import redact_url
from sentinel.errors import StoreError


def make_engine(url: str, must_exist: bool = False) -> Engine:
    """Create an engine; for SQLite turn on WAL, foreign keys and a busy timeout on every connection.

    ``must_exist`` (readers such as the CLI) refuses a SQLite file that is not there instead of creating it.
    """
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            path = Path(parsed.database)
            if must_exist and not path.exists():
                raise StoreError(f"no store at {path} (run `sentinel db upgrade`, `sentinel run` or `sentinel demo`)")
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, future=True)
    except ModuleNotFoundError as exc:  # the URL's database driver is not installed
        raise StoreError(f"store.url {redacted(url)}: its driver {exc.name!r} is not installed; for PostgreSQL use "
                         "postgresql+psycopg://... with the postgres extra (pip install 'sentinel-gpu[postgres]')"
                         ) from None
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        raise StoreError(f"store.url {redacted(url)}: {exc}") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def redacted(url: str) -> str:
    """``url`` fit for a log line: every secret in it (the password, secret query parameters) replaced by
    ``***`` (``sentinel.config.urls``), whether or not SQLAlchemy can parse it."""
    return redact_url(url)


def shown(engine: Engine) -> str:
    """The engine's URL fit for a message: no password, no secret parameter."""
    return redact_url(engine.url.render_as_string(hide_password=True))


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _alembic_config(engine: Engine) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(resources.files("sentinel_migrations")))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    try:
        command.upgrade(_alembic_config(engine), revision)
    except OperationalError as exc:
        raise StoreError(f"cannot migrate {shown(engine)}: {exc.orig}") from None


def head_revision() -> str:
    script = ScriptDirectory.from_config(_alembic_config(create_engine("sqlite://")))
    head = script.get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except OperationalError as exc:
        raise StoreError(f"cannot reach {shown(engine)}: {exc.orig}") from None
    except DatabaseError as exc:  # e.g. SQLite: "file is not a database"
        raise StoreError(f"{engine.url.database or engine.url}: not a Sentinel store ({exc.orig})") from None


def require_current(engine: Engine) -> None:
    """Refuse to run against a store that is not at the head revision (run ``sentinel db upgrade``)."""
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise StoreError(
            f"store is at revision {current or 'none'}, this build needs {head}: run `sentinel db upgrade`"
        )
