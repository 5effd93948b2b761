"""The healthy-fleet background appears at its configured rates (statistical checks on fixed seeds), and
``[background] enabled = false`` gives back the clean fleet bit for bit."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from sentinel import codec
from sentinel.errors import ConfigError
from sentinel.sim import background, groundtruth, scenario
from sentinel.sim.background import BackgroundSim
from sentinel.sim.fleet import Fleet

# sha256 of the first 720 steps of `smoke` (arrays, logs and encoded samples), computed with the fleet as it was
# before the background existed (commit f733e6a), then again when the samples gained the PCIe link and the
# NVLink replay fields and link faults their second signals (issue 36, decision 0018). Switching the background
# off must give exactly that stream.
CLEAN_SMOKE_SHA256 = "a108aa2ab1987e5b740e1c8d47fb44c37a072c4e2894ab95a8b80af0a8b5ab69"
ARRAYS = ("temp_c", "power_w", "util_pct", "sm_clock_mhz", "throttle", "lost", "ecc_sbe", "ecc_dbe", "remap_pending",
          "pcie_replay", "nvlink_crc", "ib_symbol_error", "ib_link_error_recovery", "ib_link_downed", "boot", "job",
          "ib_xmit_words")


def _quiet(**background: Any) -> scenario.Scenario:
    """A fault-free fleet with the given background settings (the rest at their defaults)."""
    return scenario.from_mapping({"name": "bg", "seed": 5, "nodes": 200, "duration_s": 86_400.0, "step_s": 30.0,
                                  "background": background})


def test_switching_the_background_off_restores_the_clean_stream_bit_for_bit() -> None:
    sc = scenario.load("smoke")
    sc = sc.clean()
    fleet = Fleet(sc, groundtruth.plan(sc))
    digest = hashlib.sha256()
    for _ in range(720):
        step = fleet.step()
        for name in ARRAYS:
            digest.update(getattr(step, name).tobytes())
        digest.update(repr(step.logs).encode())
        for sample in fleet.samples(step):
            digest.update(codec.encode(sample))
    assert digest.hexdigest() == CLEAN_SMOKE_SHA256


def test_the_background_is_on_by_default_in_every_shipped_scenario() -> None:
    for name in scenario.shipped():
        assert scenario.load(name).background.enabled, name


def test_correctable_ecc_lands_on_a_few_gpus_at_the_fleet_rate_with_a_heavy_tail() -> None:
    sc = _quiet(ecc={"gpu_share": 0.05, "per_gpu_day": 2.0, "tail_sigma": 1.5})
    sim = BackgroundSim(sc, [], {})
    gpus = sc.nodes * sc.gpus_per_node
    assert len(sim.ecc_gpus) / gpus == pytest.approx(0.05, abs=0.012)
    per_day = sim.ecc_per_s * 86_400.0
    assert per_day.sum() / gpus == pytest.approx(2.0, rel=0.5)  # lognormal sigma 1.5: the mean is noisy
    top = np.sort(per_day)[::-1][: max(len(per_day) // 10, 1)]
    assert top.sum() > 0.4 * per_day.sum()  # a tenth of the affected GPUs carry a large share


def _count(sim: BackgroundSim, what: int, states: bool = False) -> int:
    episodes = sim.states if states else sim.counter_episodes
    return int((episodes.what == what).sum())


@pytest.mark.parametrize(("section", "key", "what", "per_gpu"), [
    ("pcie", "per_1000_gpu_days", background.PCIE, True),
    ("nvlink", "per_1000_gpu_days", background.NVLINK, True),
    ("infiniband", "bursts_per_1000_port_days", background.IB_SYMBOL, False),
])
def test_link_error_bursts_come_at_their_configured_rate(section: str, key: str, what: int, per_gpu: bool) -> None:
    sc = _quiet(**{section: {key: 400.0}, "recovering": {"link_per_1000_node_days": 0.0,
                                                        "infiniband_per_1000_node_days": 0.0},
                   "lemons": {"gpu_share": 0.0}})
    units = sc.nodes * (sc.gpus_per_node if per_gpu else 1)
    expected = 400.0 * units / 1000.0
    assert _count(BackgroundSim(sc, [], {}), what) == pytest.approx(expected, rel=4 / np.sqrt(expected))


@pytest.mark.parametrize(("section", "key", "what", "per_gpu"), [
    ("remap", "per_1000_gpu_days", background.REMAP, True),
    ("thermal", "power_brake_per_1000_gpu_days", background.BRAKE, True),
    ("thermal", "fan_per_1000_node_days", background.FAN, False),
    ("recovering", "thermal_per_1000_node_days", background.EXCURSION, False),
])
def test_state_episodes_come_at_their_configured_rate(section: str, key: str, what: int, per_gpu: bool) -> None:
    sc = _quiet(**{section: {key: 300.0}})
    units = sc.nodes * (sc.gpus_per_node if per_gpu else 1)
    expected = 300.0 * units / 1000.0
    assert _count(BackgroundSim(sc, [], {}), what, states=True) == pytest.approx(expected, rel=4 / np.sqrt(expected))


def test_lemons_are_the_configured_share_and_a_share_of_precursor_faults_lands_on_them() -> None:
    sc = scenario.from_mapping({"name": "lemons", "seed": 9, "nodes": 500, "duration_s": 86_400.0,
                                "faults": {"hbm": {"rate_per_1000_node_days": 400.0, "no_precursor_share": 0.0}},
                                "background": {"lemons": {"gpu_share": 0.01, "fault_share": 0.5}}})
    truth = groundtruth.plan(sc)
    index = {groundtruth.node_name(i): i for i in range(sc.nodes)}
    lemons = background.lemon_gpus(sc, truth, index)
    healthy = [lemon for lemon in lemons if lemon[2] == sc.duration_s]
    faulty = len(lemons) - len(healthy)
    assert len(healthy) == pytest.approx(0.01 * sc.nodes * 8, rel=0.3)
    hbm = sum(1 for e in truth if e.cls == "hbm")
    assert faulty == pytest.approx(0.5 * hbm, rel=0.3)


def test_row_remaps_log_xid_63_and_stay_pending_until_the_gpu_is_reset() -> None:
    sc = _quiet(remap={"per_1000_gpu_days": 100.0, "pending_s": [600.0, 1200.0]}, telemetry={"missing_share": 0.0})
    fleet = Fleet(sc, [])
    xid63, pending_seen = 0, 0
    for _ in range(int(sc.duration_s / sc.step_s)):
        step = fleet.step()
        xid63 += sum(1 for _, _, code, _ in step.logs if code == 63)
        pending_seen = max(pending_seen, int(step.remap_pending.sum()))
    expected = 100.0 * sc.nodes * sc.gpus_per_node / 1000.0
    assert xid63 == pytest.approx(expected, rel=4 / np.sqrt(expected))
    assert 0 < pending_seen < xid63  # pending for a while, then applied at the reset


def test_slots_racks_and_the_time_of_day_shift_temperatures() -> None:
    sc = _quiet(thermal={"slot_spread_c": 6.0, "rack_sd_c": 0.0, "daily_swing_c": 3.0, "fan_per_1000_node_days": 0.0,
                         "power_brake_per_1000_gpu_days": 0.0},
                recovering={"thermal_per_1000_node_days": 0.0})
    fleet = Fleet(sc, [])
    steps = [fleet.step() for _ in range(int(sc.duration_s / sc.step_s))]
    temps = np.stack([s.temp_c for s in steps])
    by_slot = np.nanmean(temps, axis=(0, 1))
    assert by_slot[-1] - by_slot[0] == pytest.approx(6.0, abs=0.6)
    hours = np.array([s.t_s for s in steps]) / 3600.0
    afternoon, night = temps[(hours >= 14) & (hours < 16)], temps[(hours >= 2) & (hours < 4)]
    idle = np.stack([s.job for s in steps]) < 0  # idle GPUs show the ambient swing without the load
    idle_afternoon = np.nanmean(np.where(idle[(hours >= 14) & (hours < 16)][..., None], afternoon, np.nan))
    idle_night = np.nanmean(np.where(idle[(hours >= 2) & (hours < 4)][..., None], night, np.nan))
    assert idle_afternoon - idle_night == pytest.approx(2 * 3.0 * np.cos(np.pi / 4 * 0.5), abs=1.5)


def test_job_profiles_follow_their_shares() -> None:
    sc = _quiet(workload={"inference_share": 0.3, "burn_in_share": 0.1, "idle_share": 0.1})
    sim = BackgroundSim(sc, [], {})
    sim.job_started(np.arange(20_000), 20_000)
    shares = np.bincount(sim.profile, minlength=4) / 20_000
    assert shares == pytest.approx([0.5, 0.3, 0.1, 0.1], abs=0.015)


def test_telemetry_imperfections_come_at_their_shares() -> None:
    sc = _quiet(telemetry={"missing_share": 0.02, "duplicate_share": 0.01, "late_share": 0.01,
                           "gaps_per_1000_node_days": 0.0, "unsupported_share": 0.25, "clock_skew_sd_s": 2.0})
    fleet = Fleet(sc, [])
    sent = duplicates = out_of_order = 0
    last: dict[str, float] = {}
    seen: set[tuple[str, int]] = set()
    for _ in range(200):
        step = fleet.step()
        sent += sc.nodes
        for s in fleet.samples(step):
            duplicates += (s.node, s.seq) in seen
            seen.add((s.node, s.seq))
            out_of_order += s.ts < last.get(s.node, -1.0)
            last[s.node] = max(s.ts, last.get(s.node, -1.0))
    assert 1 - len(seen) / sent == pytest.approx(0.02, abs=0.005)
    assert duplicates / sent == pytest.approx(0.01, abs=0.004)
    assert out_of_order / sent == pytest.approx(0.01, abs=0.004)
    assert fleet.bg is not None
    assert fleet.bg.unsupported.mean() == pytest.approx(0.25, abs=0.07)
    assert np.std(fleet.bg.skew_s) == pytest.approx(2.0, rel=0.25)
    unsupported = next(s for s in fleet.samples(fleet.step()) if fleet.bg.unsupported[int(s.node[-5:]) - 1])
    assert all(g.nvlinks == [] and g.row_remap_pending is None for g in unsupported.gpus)


def test_precursors_vary_in_strength_and_shape() -> None:
    bg = scenario.load("mixed").background
    draws = [background.precursor_shape(bg, f"e{i}") for i in range(2000)]
    strengths = np.array([d[0] for d in draws])
    assert np.median(strengths) == pytest.approx(1.0, abs=0.1) and strengths.min() < 0.3 < 3 < strengths.max()
    shapes = [d[1] for d in draws]
    assert shapes.count("step") / 2000 == pytest.approx(0.25, abs=0.03)
    assert shapes.count("bursts") / 2000 == pytest.approx(0.25, abs=0.03)
    assert background.precursor_shape(bg, "e7") == draws[7]  # drawn from the event's id, not the order


def test_bad_background_settings_name_their_path() -> None:
    with pytest.raises(ConfigError, match=r"background\.ecc\.gpu_share: must be in \[0, 1\]"):
        scenario.from_mapping({"name": "x", "background": {"ecc": {"gpu_share": 1.5}}})
    with pytest.raises(ConfigError, match=r"background\.lemons\.sneaky: unknown key"):
        scenario.from_mapping({"name": "x", "background": {"lemons": {"sneaky": 1}}})
