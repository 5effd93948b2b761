"""Peer comparison across the nodes of a job, and the Slurm job collector that tells who the peers are."""

from __future__ import annotations

import pytest

from sentinel.detector.peers import PeerComparison
from sentinel.detector.sample_view import view_of
from sentinel.detector.windows import NodeWindow
from sentinel.errors import CollectorError
from sentinel.events import FindingClass, GpuReading, Recommendation, TelemetrySample
from sentinel_collectors.slurm_jobs import SlurmJobs


def _sample(node: str, ts: float, temp: float, jobs: list[str]) -> TelemetrySample:
    gpus = [GpuReading(index=i, temp_c=temp + 0.1 * i, power_w=600.0, util_gpu_pct=95.0, sm_clock_mhz=1980.0)
            for i in range(4)]
    return TelemetrySample(node=node, ts=ts, gpus=gpus, jobs=jobs)


def _run(hot_from: float, nodes: int = 6, steps: int = 40, jobs: list[str] | None = None) -> list:
    peers, windows, found = PeerComparison(interval_s=30.0), {}, []
    names = [f"n{i}" for i in range(nodes)]
    for k in range(steps):
        t = 10.0 * k
        for j, node in enumerate(names):
            temp = 65.0 + 0.3 * j + (12.0 if node == "n2" and t >= hot_from else 0.0)
            sample = _sample(node, t, temp, jobs if jobs is not None else ["job-7"])
            windows.setdefault(node, NodeWindow(10, 4)).push(view_of(sample))
            peers.observe(node, sample.jobs)
        found += peers.evaluate(windows, names, t)
    return found


def test_a_node_running_hotter_than_its_job_peers_becomes_one_alert() -> None:
    found = _run(hot_from=100.0)
    [finding] = found
    assert finding.node == "n2" and finding.kind is FindingClass.ANOMALY and finding.rule == "peer-outlier"
    assert finding.recommendation is Recommendation.ALERT
    assert finding.evidence["metric"] == "temp_c" and finding.evidence["job"] == "job-7"
    assert finding.evidence["peers"] == 6 and float(finding.evidence["z"]) > 5
    # evaluated every 30 s: the EWMA crosses the limit at 150 s, then three evaluations in a row (150, 180, 210)
    assert finding.observed_ts == 210.0


def test_peers_that_differ_within_their_normal_spread_raise_nothing() -> None:
    assert _run(hot_from=1e9) == []


def test_fewer_than_four_peers_are_not_compared() -> None:
    assert _run(hot_from=100.0, nodes=3) == []


def test_nodes_without_a_job_are_not_compared() -> None:
    assert _run(hot_from=100.0, jobs=[]) == []


def test_the_slurm_job_collector_reads_job_ids_with_an_argv_list() -> None:
    seen: list[list[str]] = []

    def runner(argv: list[str]) -> str:
        seen.append(argv)
        return "1042\n977_3\n\n1042\n"

    assert SlurmJobs("gpu-node-001", runner=runner).read() == ["1042", "977_3"]
    assert seen == [["squeue", "--noheader", "--format=%A", "--states=RUNNING", "--nodelist=gpu-node-001"]]


def test_the_slurm_job_collector_refuses_unexpected_output_and_bad_node_names() -> None:
    with pytest.raises(CollectorError, match="job id was expected"):
        SlurmJobs("gpu-node-001", runner=lambda argv: "JOBID\n12\n").read()
    with pytest.raises(CollectorError, match="not a valid node name"):
        SlurmJobs("node;rm -rf /")


def test_the_slurm_job_collector_finds_a_real_running_job_on_its_node(slurm) -> None:  # type: ignore[no-untyped-def]
    """Against the real Slurm test cluster (tests/services.sh starts it)."""
    from sentinel.runner import SubprocessRunner, output_of
    from tests.slurm_cluster import wait_for

    slurm.reset()
    job = slurm.submit("#!/bin/bash\nsleep 120\n", "-o", "/dev/null")
    runner = SubprocessRunner({"SLURM_CONF": slurm.conf})
    try:
        node = wait_for(lambda: slurm.jobs()[job]["nodes"] or None, 30, "the job to start")
        found = SlurmJobs(node, runner=lambda argv: output_of(runner.run(argv, 10.0), CollectorError)).read()
        assert found == [job]
        others = [n for n in slurm.nodes() if n != node]
        assert SlurmJobs(others[0], runner=lambda argv: output_of(runner.run(argv, 10.0), CollectorError)).read() == []
    finally:
        slurm.reset()
