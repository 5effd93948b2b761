"""The NVML collector through the fake NVML library (the hardware boundary): readings, lost GPUs, Xid events."""

from __future__ import annotations

import logging

import pynvml
import pytest

from sentinel import codec
from sentinel.errors import CollectorError
from sentinel.events import GpuState, LogKind, TelemetrySample
from sentinel.testing import FakeNvml, healthy_fields
from sentinel_collectors.nvml import NvmlCollector


def _fake(gpus: int = 8) -> FakeNvml:
    fake = FakeNvml(gpus)
    for gpu in fake.gpus:
        gpu.fields = healthy_fields()
    return fake


def test_every_gpu_is_read_with_identity_and_units_converted() -> None:
    fake = _fake()
    fake.gpus[3].temp_c, fake.gpus[3].power_mw = 71, 612_500
    readings = NvmlCollector(fake).read()
    assert [r.index for r in readings] == list(range(8))
    gpu = readings[3]
    assert gpu.uuid == fake.gpus[3].uuid and gpu.pci_bus_id == "00000000:48:00.0"
    assert gpu.model.startswith("NVIDIA H100") and gpu.state is GpuState.OK
    assert (gpu.temp_c, gpu.power_w, gpu.power_limit_w) == (71.0, 612.5, 700.0)
    assert gpu.mem_temp_c == 60.0 and gpu.recovery_action == 0 and gpu.row_remap_failure is False
    assert len(gpu.nvlinks) == 12 and gpu.nvlinks[0].crc_errors == 0
    assert gpu.mem_total_bytes == 80 * 2**30 and gpu.util_gpu_pct == 95.0


def test_counters_travel_raw_and_as_deltas_and_a_reset_gives_no_delta() -> None:
    fake = _fake(1)
    collector = NvmlCollector(fake)
    assert collector.read()[0].deltas == {}  # first read: a baseline
    fake.gpus[0].fields[pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL] = 7
    fake.gpus[0].fields[pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER] = 3
    second = collector.read()[0]
    assert second.ecc_sbe_volatile == 7 and second.deltas["ecc_sbe_volatile"] == 7
    assert second.deltas["pcie_replay"] == 3 and second.deltas["ecc_dbe_volatile"] == 0
    fake.gpus[0].fields[pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL] = 0  # driver reload
    third = collector.read()[0]
    assert "ecc_sbe_volatile" not in third.deltas and all(v >= 0 for v in third.deltas.values())


def test_a_gpu_that_falls_off_the_bus_is_reported_lost_and_the_rest_still_read() -> None:
    fake = _fake()
    collector = NvmlCollector(fake)
    fake.gpus[5].lost = True
    readings = collector.read()
    assert readings[5].state is GpuState.LOST and readings[5].temp_c is None
    assert readings[5].uuid == fake.gpus[5].uuid  # identity known from start-up
    assert all(r.state is GpuState.OK for i, r in enumerate(readings) if i != 5)


def test_unsupported_readings_stay_empty_instead_of_failing() -> None:
    fake = _fake(1)
    fake.gpus[0].unsupported = {"nvmlDeviceGetFanSpeed", "nvmlDeviceGetPerformanceState"}
    fake.gpus[0].fields.pop(pynvml.NVML_FI_DEV_REMAPPED_FAILURE)
    gpu = NvmlCollector(fake).read()[0]
    assert gpu.fan_pct is None and gpu.pstate is None and gpu.row_remap_failure is None
    assert gpu.temp_c == 45.0


def test_no_driver_disables_the_collector_with_one_clear_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        collector = NvmlCollector(FakeNvml(present=False))
    assert not collector.enabled and collector.read() == [] and collector.read_events(1.0) == []
    assert len(caplog.records) == 1 and "nvml collector disabled" in caplog.records[0].getMessage()


def test_the_real_pynvml_on_this_gpu_less_machine_disables_cleanly() -> None:
    collector = NvmlCollector()  # real pynvml: the NVIDIA library is absent here
    assert collector.enabled is False and "NVML unavailable" in collector.disabled_reason


def test_xid_events_are_read_without_blocking_and_name_the_gpu() -> None:
    fake = _fake()
    collector = NvmlCollector(fake, node="gpu-node-001")
    assert collector.read_events(10.0) == []
    fake.inject_xid(2, 79)
    fake.inject_xid(6, 48)
    events = collector.read_events(11.0)
    assert [(e.kind, e.xid, e.gpu_index) for e in events] == [(LogKind.XID, 79, 2), (LogKind.XID, 48, 6)]
    assert events[0].pci_bus_id == fake.gpus[2].pci_bus_id and events[0].ts == 11.0
    assert collector.read_events(12.0) == []


def test_without_event_support_readings_still_work() -> None:
    fake = _fake(2)
    fake.events_supported = False
    collector = NvmlCollector(fake)
    assert collector.enabled and collector.read_events(1.0) == [] and len(collector.read()) == 2


def test_an_unexpected_nvml_error_is_a_collector_error() -> None:
    fake = _fake(1)
    collector = NvmlCollector(fake)
    fake.gpus[0].unsupported = set()

    def broken(handle: object, sensor: int) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    fake.nvmlDeviceGetTemperature = broken  # type: ignore[method-assign]
    with pytest.raises(CollectorError, match="GPU 0"):
        collector.read()


def test_readings_encode_into_a_valid_sample() -> None:
    sample = TelemetrySample(node="gpu-node-001", ts=1.0, gpus=NvmlCollector(_fake()).read())
    assert codec.decode(codec.encode(sample)) == sample
