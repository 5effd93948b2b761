"""Shared fixtures: real SQLite stores in tmp dirs, the real PostgreSQL that tests/services.sh started."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest

from sentinel.store.engine import make_engine, upgrade
from sentinel.store.repository import Repository

ROOT = Path(__file__).resolve().parent.parent
# Modules that start services or processes of their own, or run for tens of seconds: marked ``slow`` (left out of
# `make check`), as is every test that takes a shared service's fixture. Under `make test` (two pytest-xdist
# workers) the modules that use the shared services (one Slurm cluster, one broker, one PostgreSQL) run on one
# worker, one test after another as before the suite ran in parallel (``ServiceGroups`` below); OWN_SERVICES
# start their own on free ports and run beside the others.
SLOW_MODULES = {
    "test_agent_outage", "test_autoresume", "test_bench_alerting", "test_bench_chaos", "test_bench_pipeline",
    "test_bench_soak", "test_kafka_services", "test_kafka_tls", "test_kafka_transport", "test_models_cli",
    "test_pipeline_delivery", "test_release", "test_service_metrics", "test_slurm_actuator", "test_slurm_e2e",
    "test_torch_hook", "test_kubernetes_actuator",
}
OWN_SERVICES = {"test_agent_outage", "test_bench_soak", "test_bench_pipeline", "test_release"}
SERVICE_FIXTURES = {"pg_url", "kafka_bootstrap", "slurm"}
_USES_SERVICES = re.compile(r"def test_\w+\([^)]*\b(" + "|".join(SERVICE_FIXTURES) + r")\b")


@functools.cache  # asked once per test id by the xdist controller: read each module once
def on_shared_services(module: str) -> bool:
    """Whether a test module (its name, ``test_x``) uses the shared services, read from its source."""
    if module in SLOW_MODULES and module not in OWN_SERVICES:
        return True
    path = ROOT / "tests" / f"{module}.py"
    return path.is_file() and bool(_USES_SERVICES.search(path.read_text(encoding="utf-8")))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        if (SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())) or module in SLOW_MODULES
                or item.get_closest_marker("postgres")):
            item.add_marker(pytest.mark.slow)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Each test is a unit of its own, except that every module on the shared services is one unit together."""
    from xdist.scheduler import LoadScopeScheduling

    class ServiceGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
            return "shared-services" if on_shared_services(module) else nodeid

    return ServiceGroups(config, log)  # type: ignore[arg-type]


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
