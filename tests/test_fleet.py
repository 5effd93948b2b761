"""The vectorised fleet writes each fault's documented precursor and failure signature into the stream, matches
its ground truth, and is reproducible from its seed."""

from __future__ import annotations

import numpy as np
import pytest

from sentinel import codec
from sentinel.events import GpuState, LogEvent, TelemetrySample
from sentinel.sim import groundtruth, scenario
from sentinel.sim.fleet import Fleet, Step
from sentinel.sim.groundtruth import TruthEvent, node_name

SC = scenario.from_mapping({"name": "unit", "seed": 2, "nodes": 4, "duration_s": 3000.0, "step_s": 10.0,
                            "busy_fraction": 1.0, "noise": {"temp_sd_c": 0.0, "power_sd_w": 0.0}})


def _event(cls: str, start: float, failure: float, node: int = 1, gpu: int = 2, kind: str = "fault") -> TruthEvent:
    return TruthEvent(f"t-{cls}", kind, cls, node_name(node), gpu, start, failure, start < failure, kind == "fault")


def _run(*events: TruthEvent, until: float = 3000.0) -> list[Step]:
    fleet = Fleet(SC, list(events))
    return [fleet.step() for _ in range(int(until / SC.step_s))]


def _at(steps: list[Step], t: float) -> Step:
    return next(s for s in steps if s.t_s >= t)


def _xids(steps: list[Step], start: float = 0.0, end: float = 1e9) -> list[int]:
    return [code for s in steps if start <= s.t_s < end for _, _, code, _ in s.logs]


def test_hbm_degradation_climbs_then_fails_with_an_uncorrectable_ecc_xid() -> None:
    steps = _run(_event("hbm", 500.0, 2000.0))
    before, late = _at(steps, 500.0), _at(steps, 1990.0)
    assert late.ecc_sbe[1, 2] > before.ecc_sbe[1, 2] + 50 and late.remap_pending[1, 2]
    assert _xids(steps, end=2000.0) == [63, 64]  # remap event, then remap failure, before the crash
    final = _xids(steps, start=2000.0)
    assert len(final) == 1 and final[0] in (48, 94, 95)


def test_thermal_runaway_slows_down_then_loses_the_gpu() -> None:
    steps = _run(_event("thermal", 1000.0, 2000.0))
    assert _at(steps, 1000.0).temp_c[1, 2] < 75
    hot = _at(steps, 1950.0)
    assert hot.temp_c[1, 2] >= 98 and hot.throttle[1, 2] & 0x40 and hot.sm_clock_mhz[1, 2] < 1980
    after = _at(steps, 2000.0)
    assert after.lost[1, 2] and np.isnan(after.temp_c[1, 2]) and _xids(steps) == [79]


@pytest.mark.parametrize(("cls", "field", "xid"), [("nvlink", "nvlink_crc", 74), ("pcie", "pcie_replay", 79)])
def test_link_errors_rise_before_the_failure_xid(cls: str, field: str, xid: int) -> None:
    steps = _run(_event(cls, 1000.0, 2000.0))
    assert getattr(_at(steps, 990.0), field)[1, 2] == 0
    assert getattr(_at(steps, 1990.0), field)[1, 2] > 100
    assert _xids(steps, end=2000.0) == [] and _xids(steps, start=2000.0) == [xid]
    assert _at(steps, 2100.0).lost[1, 2] == (cls == "pcie")


def test_a_failing_nvlink_replays_and_a_failing_pcie_link_downtrains_before_it_fails() -> None:
    nvlink = _run(_event("nvlink", 1000.0, 2000.0))
    assert _at(nvlink, 990.0).nvlink_replay[1, 2] == 0 and _at(nvlink, 1990.0).nvlink_replay[1, 2] >= 5
    assert _at(nvlink, 1990.0).nvlink_replay.sum() == _at(nvlink, 1990.0).nvlink_replay[1, 2]  # that GPU only
    pcie = _run(_event("pcie", 1000.0, 2000.0))
    assert not _at(pcie, 990.0).pcie_downtrained.any() and _at(pcie, 1990.0).pcie_downtrained[1, 2] == 1.0
    sample = Fleet(SC, [_event("pcie", 10.0, 2000.0)])
    for _ in range(150):
        step = sample.step()
    gpu = next(s for s in sample.samples(step) if s.node == node_name(1)).gpus[2]
    assert (gpu.pcie_link_width, gpu.pcie_link_width_max) == (8, 16)


def test_an_hbm_fault_ending_in_a_contained_xid_94_with_no_precursor_needs_no_drain() -> None:
    """NVIDIA's catalog: Xid 94 asks to restart the application, reset the GPU when convenient (decision 0018)."""
    sc = scenario.load("llama3-54d")
    hbm = [e for e in groundtruth.plan(sc) if e.cls == "hbm"]
    assert {e.failure_xid for e in hbm} == {48, 94, 95}
    assert all(e.needs_drain == (e.has_precursor or e.failure_xid != 94) for e in hbm)
    assert any(not e.needs_drain for e in hbm) and any(e.failure_xid == 94 and e.needs_drain for e in hbm)
    steps = _run(TruthEvent("t-hbm", "fault", "hbm", node_name(1), 2, 2000.0, 2000.0, False, False, 94))
    assert _xids(steps) == [94]


def test_infiniband_symbol_errors_then_recovery_then_link_down() -> None:
    steps = _run(_event("infiniband", 1000.0, 2000.0, gpu=-1))
    late = _at(steps, 1990.0)
    assert late.ib_symbol_error[1] > 1000 and late.ib_link_error_recovery[1] >= 1 and late.ib_link_downed[1] == 0
    assert _at(steps, 2000.0).ib_link_downed[1] == 1


@pytest.mark.parametrize(("cls", "codes"), [("gsp", {119, 120}), ("silent", {79}), ("app_xid", {13, 31, 43})])
def test_faults_without_precursor_strike_at_their_time_only(cls: str, codes: set[int]) -> None:
    kind = "benign" if cls == "app_xid" else "fault"
    steps = _run(_event(cls, 2000.0, 2000.0, kind=kind))
    assert _xids(steps, end=2000.0) == []
    assert set(_xids(steps, start=2000.0)) <= codes and len(_xids(steps)) == 1
    assert not _at(steps, 1990.0).lost.any()


def test_fail_slow_drops_one_gpus_clock_and_software_faults_leave_the_node_clean() -> None:
    steps = _run(_event("fail_slow", 1500.0, 1500.0), _event("software", 1500.0, 1500.0, node=3))
    after = _at(steps, 1500.0)
    assert after.sm_clock_mhz[1, 2] == pytest.approx(1980 * 0.6) and after.sm_clock_mhz[1, 3] == 1980
    clean = _run()
    assert np.array_equal(_at(steps, 2000.0).sm_clock_mhz[3], _at(clean, 2000.0).sm_clock_mhz[3])
    assert _xids(steps) == []


def test_a_spike_lasts_one_step_and_a_reboot_resets_counters_and_boot_id() -> None:
    steps = _run(_event("hbm", 100.0, 2900.0), _event("spike", 1000.0, 1000.0, kind="benign"),
                 _event("reboot", 2000.0, 2000.0, gpu=-1, kind="benign"))
    spike, next_step = _at(steps, 1000.0), _at(steps, 1010.0)
    assert spike.temp_c[1, 2] - next_step.temp_c[1, 2] > 10
    before, after = _at(steps, 1990.0), _at(steps, 2000.0)
    assert before.ecc_sbe[1, 2] > 0 and after.boot[1] == before.boot[1] + 1
    assert after.ecc_sbe[1].sum() <= 10  # counted again from zero


def test_the_same_seed_gives_the_same_stream() -> None:
    smoke = scenario.load("smoke")
    truth = groundtruth.plan(smoke)
    a, b = Fleet(smoke, truth), Fleet(smoke, truth)
    for _ in range(200):
        x, y = a.step(), b.step()
        assert np.array_equal(x.temp_c, y.temp_c, equal_nan=True) and np.array_equal(x.ecc_sbe, y.ecc_sbe)
        assert x.logs == y.logs


def test_every_ground_truth_failure_of_smoke_shows_in_the_stream_on_its_node() -> None:
    smoke = scenario.load("smoke")
    truth = groundtruth.plan(smoke)
    fleet = Fleet(smoke, truth)
    steps = [fleet.step() for _ in range(int(smoke.duration_s / smoke.step_s))]
    xid_nodes = {(node_name(n), t) for s in steps for n, _, _, _ in s.logs for t in [s.t_s]}
    for event in truth:
        if event.cls in ("gsp", "silent", "pcie", "nvlink", "thermal", "app_xid", "hbm"):
            step_t = next(s.t_s for s in steps if s.t_s >= event.failure_s)
            assert (event.node, step_t) in xid_nodes, event


def test_the_stream_converts_to_valid_wire_records() -> None:
    fleet = Fleet(SC, [_event("pcie", 0.0, 20.0), _event("app_xid", 20.0, 20.0, kind="benign")])
    fleet.step()
    step = fleet.step()
    samples, logs = fleet.samples(step), fleet.logs(step)
    assert len(samples) == SC.nodes and all(isinstance(codec.decode(codec.encode(s)), TelemetrySample)
                                            for s in samples)
    assert samples[1].gpus[2].state is GpuState.LOST
    assert {e.xid for e in logs} >= {79} and all(isinstance(codec.decode(codec.encode(e)), LogEvent) for e in logs)


def test_the_export_holds_ground_truth_and_telemetry_that_agree(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import csv

    from sentinel.sim.export import export

    smoke = scenario.load("smoke")
    counts = export(smoke, tmp_path, chunk_steps=500)
    assert counts["steps"] == int(smoke.duration_s / smoke.step_s) and counts["chunks"] == 5
    truth = list(csv.DictReader((tmp_path / "truth.csv").open()))
    assert len(truth) == counts["events"] == len(groundtruth.plan(smoke))
    chunks = [np.load(tmp_path / f"telemetry-{i:05d}.npz") for i in range(counts["chunks"])]
    t_s = np.concatenate([c["t_s"] for c in chunks])
    lost = np.concatenate([c["lost"] for c in chunks])
    assert lost.shape == (counts["steps"], smoke.nodes, smoke.gpus_per_node)
    for row in truth:
        if row["cls"] in ("silent", "pcie", "thermal"):
            node = int(row["node"].rsplit("-", 1)[1]) - 1
            k = int(np.searchsorted(t_s, float(row["failure_s"])))
            assert lost[k, node, int(row["gpu"])], row  # the GPU is gone from the failure step on
    logs = list(csv.DictReader((tmp_path / "logs.csv").open()))
    assert len(logs) == counts["logs"] > 0


JOBS = scenario.from_mapping({"name": "jobs", "seed": 4, "nodes": 8, "job_nodes": 4, "duration_s": 7200.0,
                              "step_s": 5.0, "busy_fraction": 1.0, "job_mean_s": 1e9, "checkpoint_interval_s": 600.0,
                              "checkpoint_s": 30.0, "noise": {"temp_sd_c": 0.0, "power_sd_w": 0.0}})


def test_a_jobs_peers_share_the_step_rhythm_and_other_jobs_do_not() -> None:
    fleet = Fleet(JOBS, [])
    steps = [fleet.step() for _ in range(100)]
    power = np.array([s.power_w[:, 0] - fleet.power_offset[:, 0] for s in steps])  # per node, noise-free
    assert steps[0].job[0] == steps[0].job[3] != steps[0].job[4]
    assert np.corrcoef(power[:, 0], power[:, 3])[0, 1] > 0.99  # same job
    assert np.corrcoef(power[:, 0], power[:, 4])[0, 1] < 0.99  # another job, another phase


def test_checkpoints_pause_every_peer_of_a_job() -> None:
    fleet = Fleet(JOBS, [])
    steps = [fleet.step() for _ in range(int(3600 / JOBS.step_s))]
    pauses = [s for s in steps if s.util_pct[0].mean() < 20]
    assert pauses and all(s.util_pct[:4].mean() < 20 for s in pauses)  # the whole job pauses together
    assert 0.02 < len(pauses) / len(steps) < 0.1  # ~30 s of every 600 s


def test_one_slow_gpu_slows_its_whole_job_and_not_the_other() -> None:
    fleet = Fleet(JOBS, [_event("fail_slow", 1000.0, 1000.0, node=1, gpu=5)])
    steps = [fleet.step() for _ in range(int(1500 / JOBS.step_s))]
    def median_util(node: int, start: float, end: float) -> float:  # medians step over checkpoint pauses
        return float(np.median([s.util_pct[node].mean() for s in steps if start <= s.t_s < end]))

    assert steps[-1].sm_clock_mhz[1, 5] < steps[-1].sm_clock_mhz[1, 4]
    assert median_util(2, 1100, 1500) < 0.7 * median_util(2, 600, 1000)  # a peer of the slow GPU waits
    assert median_util(6, 1100, 1500) > 0.9 * median_util(6, 600, 1000)  # node 6 is in the other job


def test_nic_traffic_counts_up_while_busy_and_jobs_come_and_go() -> None:
    churn = scenario.from_mapping({"name": "churn", "seed": 5, "nodes": 16, "job_nodes": 2, "duration_s": 86400.0,
                                   "step_s": 60.0, "busy_fraction": 0.5, "job_mean_s": 3600.0, "daily_amplitude": 1.0})
    fleet = Fleet(churn, [])
    steps = [fleet.step() for _ in range(int(churn.duration_s / churn.step_s))]
    busy_share = np.mean([(s.job >= 0).mean() for s in steps])
    assert 0.3 < busy_share < 0.7
    assert len({int(j) for s in steps for j in s.job if j >= 0}) > 16  # jobs started and ended
    assert np.all(np.diff([s.ib_xmit_words.sum() for s in steps]) >= 0) and steps[-1].ib_xmit_words.sum() > 0


def test_a_driver_reload_resets_gpu_counters_but_not_the_boot_id() -> None:
    steps = _run(_event("hbm", 100.0, 2900.0), _event("driver_reload", 1500.0, 1500.0, gpu=-1, kind="benign"))
    before, after = _at(steps, 1490.0), _at(steps, 1500.0)
    assert before.ecc_sbe[1, 2] > 10 and after.ecc_sbe[1, 2] <= 5 and after.boot[1] == before.boot[1]


def test_weekends_are_quieter_with_a_weekly_amplitude() -> None:
    week = scenario.from_mapping({"name": "week", "seed": 6, "nodes": 64, "job_nodes": 2, "duration_s": 14 * 86400.0,
                                  "step_s": 600.0, "busy_fraction": 0.6, "job_mean_s": 7200.0,
                                  "weekly_amplitude": 1.0})
    fleet = Fleet(week, [])
    steps = [fleet.step() for _ in range(int(week.duration_s / week.step_s))]
    weekday = [(s.job >= 0).mean() for s in steps if (s.t_s // 86400) % 7 < 5]
    weekend = [(s.job >= 0).mean() for s in steps if (s.t_s // 86400) % 7 >= 5]
    assert np.mean(weekend) < np.mean(weekday) - 0.05
