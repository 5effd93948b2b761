"""The circuit breaker bounds how much of the fleet is acted on and opens for good: pure judgement, no store.

(That its state survives restarts, that an operator's reset is seen, and that two controllers never admit past
the limit are store behaviour: tests/test_effects.py.)
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel.config import BreakerConfig
from sentinel.policy.breaker import CLOSED, BreakerState, Verdict, admission, limit, reset

WINDOW_S = 100.0


class Judge:
    """Threads the breaker's state through ``admission`` as the controller's transaction does."""

    def __init__(self, max_fraction: float = 0.1, window_s: float = WINDOW_S, state: BreakerState = CLOSED) -> None:
        self.config = BreakerConfig(max_fraction=max_fraction, window_s=window_s)
        self.state = state

    def admit(self, node: str, fleet: int, now: float) -> Verdict:
        verdict, new = admission(self.state, node, fleet, now, self.config)
        if new is not None:
            self.state = new
        return verdict


@settings(max_examples=200, deadline=None)
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
    fleet: int, percent: int, window_s: int, steps: list[tuple[int, int]]
) -> None:
    b = Judge(max_fraction=percent / 100, window_s=float(window_s))
    cap = max(1, percent * fleet // 100)  # floor(f * F) in exact arithmetic
    assert limit(b.config, fleet) == cap

    now = 1_000.0
    admitted: list[tuple[float, str]] = []
    opened = False
    for node_index, dt in steps:
        now += dt
        node = f"gpu-{node_index % fleet:03d}"
        in_window = {n for ts, n in admitted if ts > now - window_s}
        expected = not opened and (node in in_window or len(in_window) < cap)
        verdict = b.admit(node, fleet, now)
        assert verdict.allowed == expected, (node, now, in_window, cap)
        if verdict.allowed:
            admitted.append((now, node))
        else:
            opened = True
            assert verdict.reason
        assert b.state.is_open == opened

    # every sliding window (each one ending at an admission is the worst case) holds at most `cap` nodes
    for end, _ in admitted:
        assert len({n for ts, n in admitted if end - window_s < ts <= end}) <= cap

    if opened:
        assert not b.admit("gpu-000", fleet, now + 10 * window_s).allowed  # never closes by itself


def test_judging_changes_nothing_it_was_given() -> None:
    state = BreakerState(False, "", 0.0, [(1.0, "gpu-001")])
    admission(state, "gpu-002", 10, 2.0, BreakerConfig(max_fraction=0.1, window_s=WINDOW_S))
    assert state == BreakerState(False, "", 0.0, [(1.0, "gpu-001")])


def test_an_open_breaker_returns_no_new_state() -> None:
    opened = BreakerState(True, "storm", 5.0, [])
    verdict, new = admission(opened, "gpu-001", 10, 6.0, BreakerConfig())
    assert not verdict.allowed and new is None and "storm" in verdict.reason


def test_a_small_fleet_may_still_lose_one_node_per_window() -> None:
    b = Judge(max_fraction=0.1)
    assert limit(b.config, 3) == 1
    assert b.admit("gpu-001", 3, 10.0).allowed
    assert not b.admit("gpu-002", 3, 11.0).allowed


@pytest.mark.parametrize(
    ("fraction", "fleet", "cap"),
    [(0.1, 30, 3), (0.29, 100, 29), (0.7, 10, 7), (1.0, 8, 8), (0.5, 1, 1), (0.01, 99, 1)],
)
def test_the_limit_is_floor_of_fraction_times_fleet_despite_float_rounding(fraction: float, fleet: int,
                                                                            cap: int) -> None:
    assert limit(BreakerConfig(max_fraction=fraction), fleet) == cap


def test_the_same_node_again_within_the_window_is_not_counted_twice() -> None:
    b = Judge(max_fraction=0.2)  # 2 of 10
    assert b.admit("gpu-001", 10, 1.0).allowed
    assert b.admit("gpu-001", 10, 2.0).allowed
    assert b.admit("gpu-002", 10, 3.0).allowed
    assert b.admit("gpu-001", 10, 4.0).allowed
    assert not b.admit("gpu-003", 10, 5.0).allowed


def test_a_node_leaves_the_window_exactly_window_s_after_it_was_admitted() -> None:
    b = Judge(max_fraction=0.1)  # 1 of 10
    assert b.admit("gpu-001", 10, 1_000.0).allowed
    assert b.admit("gpu-002", 10, 1_000.0 + WINDOW_S).allowed


def test_a_second_node_just_inside_the_window_opens_the_breaker() -> None:
    b = Judge(max_fraction=0.1)
    assert b.admit("gpu-001", 10, 1_000.0).allowed
    verdict = b.admit("gpu-002", 10, 1_000.0 + WINDOW_S - 0.001)
    assert not verdict.allowed
    assert "breaker opened" in verdict.reason and "limit of 1" in verdict.reason
    assert b.state.is_open and b.state.changed_ts == pytest.approx(1_000.0 + WINDOW_S - 0.001)


def test_an_open_breaker_refuses_even_nodes_already_in_the_window() -> None:
    b = Judge(max_fraction=0.1)
    assert b.admit("gpu-001", 10, 1.0).allowed
    assert not b.admit("gpu-002", 10, 2.0).allowed
    verdict = b.admit("gpu-001", 10, 3.0)
    assert not verdict.allowed and verdict.reason.startswith("breaker open since")


def test_an_open_breaker_stays_open_long_after_the_window() -> None:
    b = Judge(max_fraction=0.1)
    b.admit("gpu-001", 10, 1.0)
    b.admit("gpu-002", 10, 2.0)
    for days in (1, 7, 365):
        assert not b.admit("gpu-003", 10, 2.0 + days * 86_400).allowed
    assert b.state.is_open


def test_reset_closes_the_breaker_and_forgets_the_window() -> None:
    b = Judge(max_fraction=0.1)
    b.admit("gpu-001", 10, 1.0)
    b.admit("gpu-002", 10, 2.0)
    b.state = reset(now=3.0)
    assert not b.state.is_open and b.state.recent == [] and b.state.changed_ts == 3.0
    assert b.admit("gpu-002", 10, 4.0).allowed  # gpu-001 no longer counts
    assert not b.admit("gpu-003", 10, 5.0).allowed


def test_a_small_partition_may_set_an_absolute_floor_on_the_nodes_acted_on_per_window() -> None:
    """Issue 17: on 8 nodes 10 % is one node an hour, so the second fault opens the breaker; ``min_nodes``
    lets the operator of a small partition allow a few (the fraction still rules a large fleet)."""
    small = BreakerConfig(max_fraction=0.1, min_nodes=3)
    assert limit(small, 8) == 3 and limit(small, 1000) == 100
    b = Judge(max_fraction=0.1)
    b.config = small
    assert all(b.admit(f"gpu-{i}", 8, float(i)).allowed for i in range(3))
    assert not b.admit("gpu-9", 8, 10.0).allowed and b.state.is_open


def test_min_healthy_holds_back_an_action_that_would_leave_too_few_nodes_in_service_without_opening() -> None:
    """Medik8s' minHealthy: with 4 of 6 nodes in service and min_healthy 4, taking one more out is refused,
    the breaker stays closed, and the same node is admitted once others return."""
    config = BreakerConfig(max_fraction=1.0, min_healthy=4)
    verdict, new = admission(CLOSED, "gpu-5", 6, 100.0, config, in_service=4)
    assert not verdict.allowed and new is None and "min_healthy" in verdict.reason
    verdict, new = admission(CLOSED, "gpu-5", 6, 100.0, config, in_service=5)
    assert verdict.allowed and new is not None and not new.is_open


def test_the_floors_are_validated_with_their_path() -> None:
    from sentinel.config import from_mapping
    from sentinel.errors import ConfigError

    with pytest.raises(ConfigError, match="policy.breaker.min_nodes"):
        from_mapping({"policy": {"breaker": {"min_nodes": 0}}})
    with pytest.raises(ConfigError, match="policy.breaker.min_healthy"):
        from_mapping({"policy": {"breaker": {"min_healthy": -1}}})
