"""Scenario files are validated like the config, and the ground truth they draw is reproducible and true to
the rates, precursor ranges and storms they state."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from sentinel.errors import ConfigError
from sentinel.sim import groundtruth, scenario
from sentinel.sim.scenario import NO_PRECURSOR, FaultClass

SHIPPED = ["llama3-54d", "llama3-mix", "mixed", "quiet", "smoke", "storm", "train", "validate"]


def test_the_named_scenarios_ship_and_load() -> None:
    assert scenario.shipped() == SHIPPED
    for name in SHIPPED:
        assert scenario.load(name).name == name


def test_the_training_scenario_seed_is_used_by_no_scenario_the_benchmarks_score() -> None:
    seeds = {name: scenario.load(name).seed for name in SHIPPED}
    assert seeds["train"] not in {seed for name, seed in seeds.items() if name != "train"}


def test_training_fleets_differ_from_each_other_and_share_no_seed_with_any_shipped_scenario() -> None:
    from sentinel.sim.trainset import training_fleets

    fleets = training_fleets(scenario.load("train"))
    assert len({(f.noise.temp_sd_c, f.step_s, f.gpus_per_node, f.job_nodes) for f in fleets}) == len(fleets)
    assert not {f.seed for f in fleets} & {scenario.load(name).seed for name in SHIPPED}
    assert len({f.background.ecc.per_gpu_day for f in fleets}) == len(fleets)  # background strength varies


def test_the_same_seed_gives_the_same_ground_truth_and_another_seed_does_not() -> None:
    mixed = scenario.load("mixed")
    assert groundtruth.plan(mixed) == groundtruth.plan(scenario.load("mixed"))
    reseeded = scenario.from_mapping({"name": "mixed", "seed": 8, "nodes": 128, "faults": {
        "hbm": {"rate_per_1000_node_days": 60.0}}})
    assert groundtruth.plan(reseeded) != groundtruth.plan(mixed)


@pytest.mark.parametrize(("raw", "message"), [
    ({"name": "x", "faults": {"hbm": {"rate": 1.0}}}, "faults.hbm.rate: unknown key"),
    ({"name": "x", "fautls": {}}, "fautls: unknown key"),
    ({"name": "x", "faults": {"hbm": {"no_precursor_share": 1.5}}},
     "faults.hbm.no_precursor_share: must be in [0, 1], got 1.5"),
    ({"name": "x", "faults": {"pcie": {"precursor_s": [600.0, 60.0]}}}, "faults.pcie.precursor_s: must be [low, high]"),
    ({"name": "x", "faults": {"gsp": {"rate_per_1000_node_days": -1.0}}},
     "faults.gsp.rate_per_1000_node_days: must be a finite number >= 0, got -1.0"),
    ({"name": "x", "duration_s": 60.0, "step_s": 120.0}, "step_s: must be > 0 and at most duration_s"),
    ({"name": "x", "nodes": 0}, "nodes: must be in [1, 1000000], got 0"),
    ({"name": "x", "duration_s": 3600.0, "storm": {"at_s": 7200.0}}, "storm.at_s: must fall inside duration_s"),
    ({"name": "x", "storm": {"at_s": 10.0, "fraction": 0.0}}, "storm.fraction: must be in (0, 1], got 0.0"),
    ({"nodes": 4}, "name"),
])
def test_impossible_scenarios_are_rejected_with_the_path_named(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        scenario.from_mapping(raw)
    assert message in str(info.value)


def test_an_unknown_scenario_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match="shipped: llama3-54d, llama3-mix, mixed, quiet, smoke, storm"):
        scenario.load("nope")


def test_fault_counts_follow_the_stated_rates() -> None:
    big = scenario.from_mapping({"name": "rates", "seed": 5, "nodes": 10_000, "duration_s": 864_000.0,
                                 "faults": {"hbm": {"rate_per_1000_node_days": 2.0},
                                            "silent": {"rate_per_1000_node_days": 0.5}}})
    counts = Counter(e.cls for e in groundtruth.plan(big) if e.kind == "fault")
    for cls, rate in (("hbm", 2.0), ("silent", 0.5)):
        expected = rate * big.node_days / 1000
        assert abs(counts[cls] - expected) < 4 * math.sqrt(expected), (cls, counts[cls], expected)
    assert set(counts) == {"hbm", "silent"}


def test_precursors_lie_in_their_stated_range_and_never_for_classes_that_warn_nobody() -> None:
    smoke = scenario.load("smoke")
    events = groundtruth.plan(smoke)
    assert events
    for event in events:
        lead = event.failure_s - event.precursor_start_s
        assert 0 <= event.precursor_start_s <= event.failure_s <= smoke.duration_s
        if event.kind != "fault":
            continue
        cls = FaultClass(event.cls)
        if not event.has_precursor:
            assert lead == 0
        else:
            low, high = smoke.faults.spec(cls).precursor_s
            assert cls not in NO_PRECURSOR
            assert low <= lead <= high or event.precursor_start_s == 0  # clipped at the start of the run
    llama = groundtruth.plan(scenario.load("llama3-mix"))
    assert not any(e.has_precursor for e in llama if e.cls in {c.value for c in NO_PRECURSOR})


def test_llama3_mix_has_the_published_rate_and_mix() -> None:
    sc = scenario.load("llama3-mix")
    rates = {cls: sc.faults.spec(cls).rate_per_1000_node_days for cls in FaultClass}
    assert sum(rates.values()) == pytest.approx(419 * 1000 / (2048 * 54), rel=0.01)  # 3.79 per 1,000 node-days
    assert rates[FaultClass.HBM] / sum(rates.values()) == pytest.approx(91 / 419, rel=0.01)
    assert rates[FaultClass.SOFTWARE] / sum(rates.values()) == pytest.approx(61 / 419, rel=0.01)


def test_the_storm_hits_its_fraction_of_the_fleet_within_its_spread() -> None:
    storm = scenario.load("storm")
    hits = [e for e in groundtruth.plan(storm) if e.kind == "storm"]
    assert storm.storm is not None
    assert len({e.node for e in hits}) == round(storm.storm.fraction * storm.nodes)
    assert all(storm.storm.at_s <= e.failure_s <= storm.storm.at_s + storm.storm.spread_s for e in hits)
    assert not any(e.needs_drain for e in hits)


def test_quiet_has_no_faults_only_benign_events() -> None:
    events = groundtruth.plan(scenario.load("quiet"))
    assert events and {e.kind for e in events} == {"benign"}


def test_sim_plan_prints_the_ground_truth_and_writes_labels(tmp_path: Path) -> None:
    csv = tmp_path / "truth.csv"
    result = subprocess.run([sys.executable, "-m", "sentinel.cli", "sim", "plan", "smoke", "--csv", str(csv),
                             "-o", "json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    events = json.loads(result.stdout)["events"]
    assert len(csv.read_text().splitlines()) == len(events) + 1
    assert [e["id"] for e in events] == [f"smoke-{i:06d}" for i in range(len(events))]


def test_a_scenario_file_of_ones_own_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\nseed = 9\nnodes = 32\nduration_s = 7200.0\n'
                    '[faults.thermal]\nrate_per_1000_node_days = 500.0\nprecursor_s = [100.0, 200.0]\n')
    mine = scenario.load(str(path))
    assert mine.nodes == 32 and {e.cls for e in groundtruth.plan(mine)} <= {"thermal"}


def test_bench_sim_reports_the_generation_rate() -> None:
    result = subprocess.run([sys.executable, "-m", "sentinel_bench.cli", "sim", "--scenario", "smoke",
                             "--steps", "20", "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["gpu_samples_per_s"] > 0 and data["gpus"] == 64 and data["goal_gpu_samples_per_s"] == 1_000_000


def test_changing_one_class_leaves_every_other_class_of_the_plan_alone() -> None:
    base = {"name": "iso", "seed": 3, "nodes": 256, "faults": {"hbm": {"rate_per_1000_node_days": 50.0},
                                                               "gsp": {"rate_per_1000_node_days": 50.0}}}
    more = {**base, "faults": {**base["faults"], "thermal": {"rate_per_1000_node_days": 80.0}}}
    a = [e for e in groundtruth.plan(scenario.from_mapping(base)) if e.cls in ("hbm", "gsp")]
    b = [e for e in groundtruth.plan(scenario.from_mapping(more)) if e.cls in ("hbm", "gsp")]
    assert [(e.cls, e.node, e.gpu, e.failure_s) for e in a] == [(e.cls, e.node, e.gpu, e.failure_s) for e in b]
