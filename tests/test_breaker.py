"""The circuit breaker bounds how much of the fleet is acted on, opens for good, and survives restarts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel.config import BreakerConfig
from sentinel.metrics import Metrics
from sentinel.policy.breaker import Breaker, Verdict
from sentinel.store.engine import make_engine, upgrade
from sentinel.store.repository import BreakerRow, Repository

WINDOW_S = 100.0


def open_repo(path: Path) -> Repository:
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    return Repository(engine)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "sentinel.db"


@pytest.fixture
def repo(db_path: Path) -> Repository:
    return open_repo(db_path)


@pytest.fixture(scope="module")
def shared_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Repository]:
    """One migrated store for all Hypothesis examples; each example starts with an operator reset."""
    repo = open_repo(tmp_path_factory.mktemp("breaker") / "sentinel.db")
    yield repo
    repo.engine.dispose()


def breaker(
    repo: Repository, max_fraction: float = 0.1, window_s: float = WINDOW_S, metrics: Metrics | None = None
) -> Breaker:
    return Breaker(repo, BreakerConfig(max_fraction=max_fraction, window_s=window_s), metrics or Metrics())


def breaker_open_gauge(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("sentinel_breaker_open")


# ----- the invariant -----------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    fleet=st.integers(min_value=1, max_value=40),
    percent=st.integers(min_value=1, max_value=25) | st.integers(min_value=1, max_value=100),
    window_s=st.integers(min_value=1, max_value=60),
    # (node, seconds since the previous admission): short steps so windows fill up and the breaker opens often
    steps=st.lists(
        st.tuples(st.integers(min_value=0, max_value=39), st.integers(min_value=0, max_value=12)),
        min_size=1,
        max_size=30,
    ),
)
def test_admitted_nodes_per_window_never_exceed_the_limit_and_a_refusal_opens_for_good(
    shared_repo: Repository, fleet: int, percent: int, window_s: int, steps: list[tuple[int, int]]
) -> None:
    metrics = Metrics()
    b = breaker(shared_repo, max_fraction=percent / 100, window_s=float(window_s), metrics=metrics)
    b.reset(now=0.0)
    limit = max(1, percent * fleet // 100)  # floor(f * F) in exact arithmetic
    assert b.limit(fleet) == limit

    now = 1_000.0
    admitted: list[tuple[float, str]] = []
    opened = False
    for node_index, dt in steps:
        now += dt
        node = f"gpu-{node_index % fleet:03d}"
        in_window = {n for ts, n in admitted if ts > now - window_s}
        expected = not opened and (node in in_window or len(in_window) < limit)
        verdict = b.admit(node, fleet, now)
        assert verdict.allowed == expected, (node, now, in_window, limit)
        if verdict.allowed:
            admitted.append((now, node))
            assert breaker_open_gauge(metrics) == 0
        else:
            opened = True
            assert verdict.reason
            assert breaker_open_gauge(metrics) == 1
        assert b.state().is_open == opened

    # every sliding window (each one ending at an admission is the worst case) holds at most `limit` nodes
    for end, _ in admitted:
        assert len({n for ts, n in admitted if end - window_s < ts <= end}) <= limit

    if opened:
        later = now + 10 * window_s
        assert not b.admit("gpu-000", fleet, later).allowed  # never closes by itself, even after the window
        restarted = breaker(shared_repo, max_fraction=percent / 100, window_s=float(window_s))
        assert restarted.state().is_open
        assert not restarted.admit("gpu-000", fleet, later).allowed


# ----- specific behaviour ------------------------------------------------------------------------------------


def test_a_fresh_store_starts_closed(repo: Repository) -> None:
    state = breaker(repo).state()
    assert not state.is_open and state.recent == []


def test_a_small_fleet_may_still_lose_one_node_per_window(repo: Repository) -> None:
    b = breaker(repo, max_fraction=0.1)
    assert b.limit(3) == 1
    assert b.admit("gpu-001", 3, 10.0).allowed
    assert not b.admit("gpu-002", 3, 11.0).allowed


@pytest.mark.parametrize(
    ("fraction", "fleet", "limit"),
    [(0.1, 30, 3), (0.29, 100, 29), (0.7, 10, 7), (1.0, 8, 8), (0.5, 1, 1), (0.01, 99, 1)],
)
def test_the_limit_is_floor_of_fraction_times_fleet_despite_float_rounding(
    repo: Repository, fraction: float, fleet: int, limit: int
) -> None:
    assert breaker(repo, max_fraction=fraction).limit(fleet) == limit


def test_the_same_node_again_within_the_window_is_not_counted_twice(repo: Repository) -> None:
    b = breaker(repo, max_fraction=0.2)  # 2 of 10
    assert b.admit("gpu-001", 10, 1.0).allowed
    assert b.admit("gpu-001", 10, 2.0).allowed
    assert b.admit("gpu-002", 10, 3.0).allowed
    assert b.admit("gpu-001", 10, 4.0).allowed
    assert not b.admit("gpu-003", 10, 5.0).allowed


def test_a_node_leaves_the_window_exactly_window_s_after_it_was_admitted(repo: Repository) -> None:
    b = breaker(repo, max_fraction=0.1)  # 1 of 10
    assert b.admit("gpu-001", 10, 1_000.0).allowed
    assert b.admit("gpu-002", 10, 1_000.0 + WINDOW_S).allowed


def test_a_second_node_just_inside_the_window_opens_the_breaker(repo: Repository) -> None:
    metrics = Metrics()
    b = breaker(repo, max_fraction=0.1, metrics=metrics)
    assert b.admit("gpu-001", 10, 1_000.0).allowed
    verdict = b.admit("gpu-002", 10, 1_000.0 + WINDOW_S - 0.001)
    assert not verdict.allowed
    assert "breaker opened" in verdict.reason and "limit of 1" in verdict.reason
    assert b.state().is_open and b.state().changed_ts == pytest.approx(1_000.0 + WINDOW_S - 0.001)
    assert breaker_open_gauge(metrics) == 1


def test_an_open_breaker_refuses_even_nodes_already_in_the_window(repo: Repository) -> None:
    b = breaker(repo, max_fraction=0.1)
    assert b.admit("gpu-001", 10, 1.0).allowed
    assert not b.admit("gpu-002", 10, 2.0).allowed
    verdict = b.admit("gpu-001", 10, 3.0)
    assert not verdict.allowed and verdict.reason.startswith("breaker open since")


def test_an_open_breaker_stays_open_long_after_the_window(repo: Repository) -> None:
    b = breaker(repo, max_fraction=0.1)
    b.admit("gpu-001", 10, 1.0)
    b.admit("gpu-002", 10, 2.0)
    for days in (1, 7, 365):
        assert not b.admit("gpu-003", 10, 2.0 + days * 86_400).allowed
    assert b.state().is_open


def test_the_open_state_survives_a_restart_on_the_same_store(db_path: Path, repo: Repository) -> None:
    b = breaker(repo, max_fraction=0.1)
    b.admit("gpu-001", 10, 1.0)
    b.admit("gpu-002", 10, 2.0)
    opened = b.state()
    repo.engine.dispose()

    metrics = Metrics()
    after = breaker(open_repo(db_path), max_fraction=0.1, metrics=metrics)
    assert after.state() == opened
    assert not after.admit("gpu-003", 10, 10_000.0).allowed
    assert breaker_open_gauge(metrics) == 1


def test_the_window_survives_a_restart_on_the_same_store(db_path: Path, repo: Repository) -> None:
    breaker(repo, max_fraction=0.1).admit("gpu-001", 10, 1.0)
    repo.engine.dispose()
    after = breaker(open_repo(db_path), max_fraction=0.1)
    assert not after.admit("gpu-002", 10, 2.0).allowed  # gpu-001 still counts after the restart


def test_reset_closes_the_breaker_and_forgets_the_window(repo: Repository) -> None:
    metrics = Metrics()
    b = breaker(repo, max_fraction=0.1, metrics=metrics)
    b.admit("gpu-001", 10, 1.0)
    b.admit("gpu-002", 10, 2.0)
    row = b.reset(now=3.0)
    assert not row.is_open and row.recent == [] and row.changed_ts == 3.0
    assert b.state() == row
    assert breaker_open_gauge(metrics) == 0
    assert b.admit("gpu-002", 10, 4.0).allowed  # gpu-001 no longer counts
    assert not b.admit("gpu-003", 10, 5.0).allowed


def test_reset_is_seen_by_another_breaker_on_the_same_store(repo: Repository) -> None:
    policy = breaker(repo, max_fraction=0.1)
    policy.admit("gpu-001", 10, 1.0)
    policy.admit("gpu-002", 10, 2.0)
    breaker(repo, max_fraction=0.1).reset(now=3.0)  # the operator's CLI
    assert policy.admit("gpu-002", 10, 4.0).allowed


def _two_controllers_race(url: str) -> tuple[list[bool], list[str]]:
    """Two controllers (own engines, same store) admit different nodes at once under a limit of 1 node. The
    first to read waits until the other has read too: the interleaving that broke read -> decide -> save."""
    import contextlib
    import threading

    from sentinel.store.engine import make_engine

    config = BreakerConfig(max_fraction=0.1, window_s=WINDOW_S)
    repos = [Repository(make_engine(url)) for _ in range(2)]
    repos[0].save_breaker(BreakerRow(False, "reset by operator", 0.0, []))
    both_read = threading.Barrier(2, timeout=2.0)
    for r in repos:
        load = r.load_breaker

        def slow_load(load=load):  # type: ignore[no-untyped-def]
            row = load()
            # when the other controller is held by the store's lock there is no interleaving to wait for
            with contextlib.suppress(threading.BrokenBarrierError):
                both_read.wait()
            return row

        r.load_breaker = slow_load  # type: ignore[method-assign]
    admitted: list[bool] = [False, False]

    def admit(i: int) -> None:
        admitted[i] = Breaker(repos[i], config, Metrics()).admit(f"node-{i}", 10, 1000.0).allowed

    threads = [threading.Thread(target=admit, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    state = Repository(make_engine(url)).load_breaker()
    assert state is not None
    return admitted, [node for _, node in state.recent]


def test_two_controllers_never_admit_past_the_limit_and_the_window_keeps_what_was_admitted(db_path: Path) -> None:
    open_repo(db_path)
    admitted, window = _two_controllers_race(f"sqlite:///{db_path}")
    assert sum(admitted) == 1
    assert window == [f"node-{admitted.index(True)}"]


def test_two_controllers_on_postgresql_never_admit_past_the_limit(pg_url: str) -> None:
    engine = make_engine(pg_url)
    upgrade(engine)
    admitted, window = _two_controllers_race(pg_url)
    assert sum(admitted) == 1
    assert window == [f"node-{admitted.index(True)}"]


def test_admission_is_a_pure_judgement_of_a_state() -> None:
    from sentinel.policy.breaker import admission

    config = BreakerConfig(max_fraction=0.1, window_s=WINDOW_S)
    empty = BreakerRow(False, "", 0.0, [])
    ok, state = admission(empty, "a", 10, 50.0, config)
    assert ok.allowed and state == BreakerRow(False, "", 0.0, [(50.0, "a")])
    again, same = admission(state, "a", 10, 60.0, config)  # the same node again: no new place taken
    assert again.allowed and same is not None and {n for _, n in same.recent} == {"a"}
    refused, opened = admission(state, "b", 10, 60.0, config)
    assert not refused.allowed and opened is not None and opened.is_open and opened.recent == [(50.0, "a")]
    later, _ = admission(state, "b", 10, 50.0 + WINDOW_S + 1, config)  # "a" left the window
    assert later.allowed
    assert admission(opened, "c", 10, 1e9, config) == (Verdict(False, f"breaker open since 60: {opened.reason}"), None)
