"""Shared fixtures: real SQLite stores in tmp dirs, the real PostgreSQL that tests/services.sh started."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sentinel.store.engine import make_engine, upgrade
from sentinel.store.repository import Repository

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sentinel.db'}"


@pytest.fixture
def repo(sqlite_url: str) -> Repository:
    engine = make_engine(sqlite_url)
    upgrade(engine)
    return Repository(engine)


@pytest.fixture
def pg_url() -> str:
    """URL of the test PostgreSQL; in CI its absence is a failure, locally a skip (run `make test`)."""
    url = os.environ.get("SENTINEL_TEST_PG_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("SENTINEL_TEST_PG_URL is not set: tests/services.sh did not start PostgreSQL")
        pytest.skip("no PostgreSQL: run through `make test` (tests/services.sh starts one)")
    return url


@pytest.fixture
def data_dir() -> Path:
    """The shared public datasets (override with SENTINEL_DATA_DIR)."""
    return Path(os.environ.get("SENTINEL_DATA_DIR", ROOT.parent / "shared" / "data"))


@pytest.fixture
def kafka_bootstrap() -> str:
    """HOST:PORT of the tansu broker tests/services.sh started (memory storage)."""
    bootstrap = os.environ.get("SENTINEL_TEST_KAFKA")
    if not bootstrap:
        if os.environ.get("CI"):
            pytest.fail("SENTINEL_TEST_KAFKA is not set: tests/services.sh did not start tansu")
        pytest.skip("no Kafka broker: run through `make test` (tests/services.sh starts tansu)")
    return bootstrap


@pytest.fixture
def slurm():  # type: ignore[no-untyped-def]
    """The real Slurm cluster tests/services.sh started (tests/slurm.sh), with no jobs and no drained node."""
    from tests.slurm_cluster import cluster_from_env

    return cluster_from_env()
