"""Leave-one-machine-out: each machine is scored with the choice the other machines made, never its own."""

from __future__ import annotations

from sentinel_bench.server_lomo import chosen_elsewhere, group_of, leave_one_machine_out
from sentinel_bench.server_scoring import Counts

GOOD = Counts(alerts=1, hit_alerts=1, segments=1, detected=1, days=1.0)
BAD = Counts(alerts=4, hit_alerts=0, segments=1, detected=0, days=1.0)


def _machine(default: Counts, other: Counts) -> dict[str, dict[str, Counts]]:
    return {d: {"default": default, "other": other} for d in ("sentinel", "threshold", "iforest")}


def test_the_held_out_machine_gets_the_candidate_that_won_on_the_others() -> None:
    per_machine = {"m-1": _machine(BAD, GOOD), "m-2": _machine(BAD, GOOD), "m-3": _machine(GOOD, BAD),
                   "m-4": _machine(BAD, GOOD)}
    result = leave_one_machine_out(per_machine)
    assert result["choices"]["m-3"]["sentinel"] == "other"  # m-3 preferred "default", but it does not choose
    assert result["choices"]["m-1"]["sentinel"] == "other"
    # every machine scores with "other": good on three, bad on m-3: 3 of 4 segments, 3 of 7 alerts hit
    assert result["event_recall"] == 0.75 and result["event_precision"] == round(3 / 7, 4)
    assert result["baselines"]["iforest"]["event_f1"] == result["event_f1"]
    assert result["groups"]["m"]["sentinel"] == result["event_f1"]


def test_ties_and_a_single_machine_keep_the_default_candidate() -> None:
    single = leave_one_machine_out({"m-1": _machine(GOOD, GOOD)})
    assert single["choices"]["m-1"] == {"sentinel": "default", "threshold": "default", "iforest": "default"}
    assert single["event_f1"] == 1.0


def test_machine_groups_are_the_published_prefixes() -> None:
    assert group_of("machine-1-2") == "machine-1" and group_of("omi-12") == "omi" and group_of("solo") == "solo"


def test_a_setting_chosen_on_another_dataset_is_applied_unchanged_to_every_machine_here() -> None:
    elsewhere = {"x-1": _machine(BAD, GOOD), "x-2": _machine(BAD, GOOD)}
    here = {"m-1": _machine(GOOD, BAD), "m-2": _machine(GOOD, BAD)}
    result = chosen_elsewhere(here, elsewhere)
    assert result["sentinel"] == {"choice": "other", "event_f1": 0.0}  # what suits elsewhere fails here
    assert result["iforest"]["choice"] == "other"
