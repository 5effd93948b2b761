"""Detection rules judged on literal samples and log events (no transport, no store)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel.config import DetectorConfig, from_mapping
from sentinel.detector.rules import pci_key, sample_rules, xid_rule
from sentinel.detector.sample_view import view_of
from sentinel.detector.windows import NodeWindow
from sentinel.detector.xid import CATALOG, classify
from sentinel.events import GpuReading, GpuState, LogEvent, LogKind, Recommendation, Severity, TelemetrySample

CFG: DetectorConfig = from_mapping({}).detector


def _run(samples: list[TelemetrySample], cfg: DetectorConfig = CFG) -> list:
    window, previous, found = NodeWindow(cfg.window_samples), {}, []
    for sample in map(view_of, samples):
        readings = window.push(sample)
        found += sample_rules(window, sample, cfg, sample.ts, previous, readings)
        previous = {g.index: g for g in sample.gpus}
    return found


def _sample(ts: float, temp: float = 60.0, state: GpuState = GpuState.OK, throttle: int = 0,
            row_remap_failure: bool = False) -> TelemetrySample:
    gpu = GpuReading(index=0, state=state, temp_c=None if state is GpuState.LOST else temp,
                     throttle_reasons=throttle, row_remap_failure=row_remap_failure)
    return TelemetrySample(node="n1", ts=ts, gpus=[gpu, GpuReading(index=1, temp_c=55.0)])


@pytest.mark.parametrize("xid", [48, 64, 74, 79, 95, 119, 120])
def test_hardware_xids_are_fatal_and_recommend_a_drain(xid: int) -> None:
    info = classify(xid)
    assert info.severity is Severity.FATAL and info.recommendation is Recommendation.DRAIN


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 63, 68])
def test_application_xids_recommend_nothing(xid: int) -> None:
    assert classify(xid).recommendation is Recommendation.NONE


def test_an_unknown_xid_is_escalated_to_a_person_not_to_a_drain() -> None:
    assert 9999 not in CATALOG
    assert classify(9999).recommendation is Recommendation.ALERT


def test_xid154_is_judged_by_the_recovery_action_it_names() -> None:
    reboot = classify(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")
    assert reboot.recommendation is Recommendation.DRAIN
    assert classify(154, "changed from 0x2 (Node Reboot Required) to 0x0 (None)").recommendation is not \
        Recommendation.DRAIN


def test_xid_finding_carries_its_evidence_and_a_stable_id() -> None:
    event = LogEvent(node="n1", ts=100.0, kind=LogKind.XID, xid=79, pci_bus_id="0000:65:00",
                     message="NVRM: Xid (PCI:0000:65:00): 79, pid='<unknown>', GPU has fallen off the bus.")
    first, again = xid_rule(event, 101.0, 3), xid_rule(event, 202.0, 3)
    assert first is not None and again is not None
    assert first.id == again.id  # derived from the evidence, not from when we looked
    assert first.evidence["xid"] == 79 and first.evidence["pci_bus_id"] == "0000:65:00"
    assert first.gpu_index == 3 and "GPU 3" in first.summary


def test_non_xid_log_lines_produce_no_xid_finding() -> None:
    event = LogEvent(node="n1", ts=1.0, kind=LogKind.PCIE_AER, message="pcieport 0000:00:01.0: AER: Corrected error")
    assert xid_rule(event, 1.0, None) is None


def test_a_lost_gpu_is_reported_once_per_episode() -> None:
    found = _run([_sample(0), _sample(10, state=GpuState.LOST), _sample(20, state=GpuState.LOST),
                  _sample(30), _sample(40, state=GpuState.LOST)])
    assert [f.rule for f in found] == ["gpu-lost", "gpu-lost"]
    assert [f.observed_ts for f in found] == [10, 40]


def test_heat_must_be_sustained_before_it_drains_and_each_crossing_only_warns() -> None:
    spikes = _run([_sample(t, temp) for t, temp in [(0, 60), (10, 97), (20, 60), (30, 97), (40, 60)]])
    assert [(f.rule, f.recommendation, f.observed_ts) for f in spikes] == [
        ("thermal-high", Recommendation.ALERT, 10), ("thermal-high", Recommendation.ALERT, 30)]
    sustained = [f for f in _run([_sample(t * 10.0, 93.5 + t) for t in range(5)])]
    assert [(f.rule, f.observed_ts) for f in sustained] == [("thermal-high", 0.0), ("thermal-sustained", 20.0)]
    finding = sustained[1]
    assert finding.rule == "thermal-sustained" and finding.recommendation is Recommendation.CHECKPOINT_DRAIN
    assert finding.evidence["slope_c_per_sample"] == pytest.approx(1.0)


def test_thermal_throttling_raises_confidence() -> None:
    plain = _run([_sample(t * 10.0, 94.0) for t in range(3)])[-1]
    throttled = _run([_sample(t * 10.0, 94.0, throttle=0x40) for t in range(3)])[-1]
    assert throttled.confidence > plain.confidence
    assert throttled.evidence["thermal_throttle"] is True


def test_a_thermal_episode_ends_only_after_cooling_below_the_hysteresis() -> None:
    temps = [94, 94, 94, 92, 94, 94, 94, 80, 80, 80, 94, 94, 94]
    found = [f for f in _run([_sample(i * 10.0, t) for i, t in enumerate(temps)]) if f.rule == "thermal-sustained"]
    assert len(found) == 2  # 92 C is inside the 3 C hysteresis band: same episode


def test_row_remap_failure_is_fatal_when_it_appears() -> None:
    found = _run([_sample(0), _sample(10, row_remap_failure=True), _sample(20, row_remap_failure=True)])
    assert [f.rule for f in found] == ["row-remap-failure"]


@pytest.mark.parametrize("text", ["0000:65:00", "00000000:65:00.0", "65:00.0", "0000:65:00.0 "])
def test_pci_ids_from_logs_and_nvml_normalise_to_one_key(text: str) -> None:
    assert pci_key(text) == "65:00"


def test_the_thermal_threshold_is_configurable() -> None:
    cfg = from_mapping({"detector": {"thermal": {"temp_c": 85, "sustain_samples": 2}}}).detector
    assert [f.rule for f in _run([_sample(0, 86), _sample(10, 86)], cfg)] == ["thermal-high", "thermal-sustained"]


_gpu = st.builds(  # None (no reading) is one choice of several: most GPUs give most fields, as on a cluster
    GpuReading, index=st.just(0), state=st.sampled_from([GpuState.OK] * 9 + [GpuState.LOST]),
    temp_c=st.sampled_from([None, 40.0, 80.0, 89.5, 92.9, 93.0, 97.0]),
    util_gpu_pct=st.sampled_from([None, 0.0, 30.0, 60.0, 99.0, 99.0]),
    sm_clock_mhz=st.sampled_from([None, 300.0, 1100.0, 1400.0, 1410.0, 1410.0]),
    power_w=st.sampled_from([None, 100.0, 500.0]), throttle_reasons=st.sampled_from([None, 0, 0x40]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(_gpu, min_size=2, max_size=3), st.integers(1, 3)), min_size=1, max_size=8),
       st.booleans())
def test_rules_answer_alike_from_the_pushed_readings_and_from_the_sample(states: list, shuffle: bool) -> None:
    """The common cases read the columns ``push`` returned (thermal, stragglers); the findings are the ones the
    sample's own GPUs give, whatever GPUs are missing, lost, silent or out of order."""
    cfg = from_mapping({"detector": {"thermal": {"sustain_samples": 3}, "straggler": {"sustain_samples": 2}}}).detector
    with_readings, without = NodeWindow(cfg.window_samples, 2), NodeWindow(cfg.window_samples, 2)
    found: tuple[list, list] = ([], [])
    held = [gpus for gpus, repeat in states for _ in range(repeat)]  # a state lasts a few samples, as heat does
    for t, gpus in enumerate(held):
        readings = [msgspec.structs.replace(g, index=i) for i, g in enumerate(gpus)]
        sample = view_of(TelemetrySample(node="gpu-01", ts=float(t + 1),
                                         gpus=list(reversed(readings)) if shuffle else readings))
        found[0].extend(sample_rules(with_readings, sample, cfg, 0.0, readings=with_readings.push(sample)))
        without.push(sample)
        found[1].extend(sample_rules(without, sample, cfg, 0.0))
    assert [(f.rule, f.gpu_index, f.summary) for f in found[0]] == [(f.rule, f.gpu_index, f.summary) for f in found[1]]
