"""The chaos bench's plan and score: seeded, covering what the issue asks for, scored against the ground truth."""

from __future__ import annotations

from sentinel_bench.chaos_plan import PROCESSES, Plan, make_plan, score

NODES = [f"node{i}" for i in range(1, 13)]


def test_the_plan_is_the_same_for_the_same_seed_and_differs_for_another() -> None:
    assert make_plan(NODES, 300, seed=1) == make_plan(NODES, 300, seed=1)
    assert make_plan(NODES, 300, seed=1).events != make_plan(NODES, 300, seed=2).events


def test_the_default_plan_has_the_kills_and_restarts_the_issue_asks_for_inside_the_run() -> None:
    plan = make_plan(NODES, 300, seed=7)
    kinds = [e.kind for e in plan.events]
    assert kinds.count("kill") >= 20 and kinds.count("broker") == 3 and kinds.count("slurmctld") == 2
    assert all(0 < e.at_s < 300 for e in plan.events)
    assert {e.target for e in plan.events if e.kind == "kill"} <= set(PROCESSES)
    assert [e.at_s for e in plan.events] == sorted(e.at_s for e in plan.events)


def test_nodes_split_into_isolated_faults_a_storm_and_healthy_ones_with_room_for_part_of_the_storm() -> None:
    plan = make_plan(NODES, 300, seed=3)
    assert len(plan.isolated) == 5 and len(plan.storm) == 5 and len(plan.healthy) == 2
    assert set(plan.isolated) | set(plan.storm) | set(plan.healthy) == set(NODES)
    assert plan.breaker_limit == 7  # floor(0.6 x 12): the storm fits only 2 more
    faults = {e.target: e.at_s for e in plan.events if e.kind == "fault"}
    assert set(faults) == set(plan.isolated) | set(plan.storm)
    assert len({faults[n] for n in plan.storm}) == 1  # the storm hits at once
    assert max(faults[n] for n in plan.isolated) < faults[plan.storm[0]]


PLAN = Plan(events=[], isolated=["a", "b"], storm=["c", "d", "e"], healthy=["f"], breaker_limit=3)


def test_the_breaker_may_admit_a_storm_node_before_a_late_isolated_one() -> None:
    """Chaos can delay an isolated fault's finding past the storm: whichever faulted nodes come first fill the
    limit, and that is not a missing drain."""
    result = score(PLAN, drains={"a": 1, "c": 1, "d": 1}, restarts={}, found={"a", "b", "c", "d", "e"})
    assert result["drains_missing"] == 0 and result["breaker_exceeded"] == 0


def test_a_perfect_run_scores_zero_on_every_failure_count() -> None:
    result = score(PLAN, drains={"a": 1, "b": 1, "d": 1}, restarts={"a": 1, "b": 1, "d": 1, "c": 0},
                   found={"a", "b", "c", "d", "e"})
    assert result == {"faults": 5, "drains_expected": 3, "drains_missing": 0, "drains_duplicated": 0,
                      "requeues_duplicated": 0, "false_drains": 0, "breaker_limit": 3, "breaker_exceeded": 0,
                      "findings_lost": 0}


def test_every_kind_of_failure_is_counted() -> None:
    result = score(PLAN, drains={"a": 2, "f": 1}, restarts={"a": 2, "f": 1}, found={"a", "c", "d"})
    assert result["drains_missing"] == 2  # three faulted nodes fit under the limit; only a was drained
    assert result["drains_duplicated"] == 1 and result["requeues_duplicated"] == 1  # a twice
    assert result["false_drains"] == 1  # f was healthy
    over = score(PLAN, drains={"a": 1, "b": 1, "c": 1, "d": 1}, restarts={}, found={"a", "b", "c", "d", "e"})
    assert over["breaker_exceeded"] == 1 and over["drains_missing"] == 0  # four nodes under a limit of three
    assert result["findings_lost"] == 2  # b and e have no stored finding
