"""The fuzz benchmark's machinery and the crashes it found (issue 38, item 5): every decoder of outside bytes
refuses bad input with a reason (a SentinelError) and never raises anything else."""

from __future__ import annotations

import pytest

from sentinel.actuator.slurm_state import expand_hostlist, parse_jobs, parse_nodes
from sentinel.errors import ActuatorError
from sentinel_bench.fuzz import decoders, run_fuzz, seeds


def test_every_seed_is_accepted_by_its_own_decoder() -> None:
    every = decoders()
    for seed in seeds():
        accepted = []
        for name, decode in every.items():
            try:
                decode(seed)
                accepted.append(name)
            except Exception:  # noqa: BLE001,S112 - refusals of other kinds' seeds are expected
                continue
        assert accepted, f"no decoder takes the seed {seed[:60]!r}"


def test_a_short_fuzz_run_has_no_crash_and_reports_its_keys() -> None:
    result = run_fuzz(1500, seed=7)
    assert result["crashes"] == 0, result["crash_examples"]
    assert result["messages"] == 1500 and result["max_rss_mib"] > 0
    assert sum(t["refused"] for t in result["by_decoder"].values()) > 0  # the mutations do reach refusals


@pytest.mark.parametrize("text", ["[" * 50_000 + "]" * 50_000, '{"a":' * 50_000 + "1" + "}" * 50_000])
def test_json_nested_too_deeply_is_refused_not_a_recursion_error(text: str) -> None:
    for parse in (parse_jobs, parse_nodes):
        with pytest.raises(ActuatorError, match="nested too deeply"):
            parse(text)


def test_nan_and_infinity_in_squeue_output_are_no_number() -> None:
    [job] = parse_jobs('{"jobs": [{"job_id": 42, "job_state": ["RUNNING"], "nodes": "gpu-01", "restart_cnt": NaN, '
                       '"priority": Infinity, "eligible_time": -Infinity}]}')
    assert (job.restarts, job.priority, job.eligible_ts) == (0, 0, 0.0)


def test_a_hostlist_that_would_name_a_billion_nodes_is_refused() -> None:
    with pytest.raises(ActuatorError, match="more than 100,000 nodes"):
        expand_hostlist("gpu-[1-1000000000]")
