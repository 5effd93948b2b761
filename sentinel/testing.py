"""Fakes we ship, only at the hardware boundary: a fake NVML library for hosts without a GPU.

``FakeNvml`` answers the subset of ``pynvml`` functions the NVML collector calls, with pynvml's own error
classes, constants and ``c_nvmlFieldValue_t`` structures, so the collector's code path is the production one.
Tests (and ``sentinel-bench agent``) change a ``FakeGpu``'s fields to make it run hot, count ECC errors, raise
an Xid event or fall off the bus.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml


class _PlainFieldValue(ctypes.Structure):
    _fields_ = pynvml.c_nvmlFieldValue_t._fields_


@dataclass
class FakeGpu:
    index: int
    temp_c: int = 45
    power_mw: int = 250_000
    power_limit_mw: int = 700_000
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    fan_pct: int = 40
    clocks_event_reasons: int = 0
    pstate: int = 0
    util_gpu: int = 95
    util_mem: int = 40
    mem_used: int = 60 * 2**30
    mem_total: int = 80 * 2**30
    fields: dict[int, int | float] = field(default_factory=dict)  # NVML field id -> value
    unsupported: set[str] = field(default_factory=set)  # pynvml function names that raise NotSupported
    pcie_gen: int = 5
    pcie_gen_max: int = 5
    pcie_width: int = 16
    pcie_width_max: int = 16
    nvlink_down: set[int] = field(default_factory=set)  # links whose state reads disabled
    lost: bool = False
    model: str = "NVIDIA H100 80GB HBM3"

    @property
    def uuid(self) -> str:
        return f"GPU-00000000-0000-0000-0000-{self.index:012d}"

    @property
    def pci_bus_id(self) -> str:
        return f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """Stands in for the ``pynvml`` module. ``present=False`` behaves like a host without the driver."""

    NVMLError = pynvml.NVMLError
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_Timeout = pynvml.NVMLError_Timeout

    def __init__(self, gpus: int = 8, present: bool = True, events_supported: bool = True) -> None:
        self.present = present
        self.events_supported = events_supported
        self.gpus = [FakeGpu(i) for i in range(gpus)]
        self.pending_events: list[tuple[int, int]] = []  # (gpu index, xid)
        self.calls = 0
        self.initialised = False

    # --- test controls ---------------------------------------------------------------------------------------
    def inject_xid(self, gpu: int, xid: int) -> None:
        self.pending_events.append((gpu, xid))

    # --- pynvml surface -------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        if not self.present:
            raise _error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised = True

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        return self.gpus[index]

    def _gpu(self, handle: FakeGpu, fn: str) -> FakeGpu:
        self.calls += 1
        if handle.lost:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fn in handle.unsupported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return handle

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:  # noqa: N802
        return SimpleNamespace(busId=self._gpu(h, "nvmlDeviceGetPciInfo").pci_bus_id)

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetName").model

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetTemperature").temp_c

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock: int) -> int:  # noqa: N802
        gpu = self._gpu(h, "nvmlDeviceGetClockInfo")
        return gpu.sm_clock_mhz if clock == pynvml.NVML_CLOCK_SM else gpu.mem_clock_mhz

    def nvmlDeviceGetFanSpeed(self, h: FakeGpu) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetFanSpeed").fan_pct

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetCurrentClocksEventReasons").clocks_event_reasons

    def nvmlDeviceGetPerformanceState(self, h: FakeGpu) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetPerformanceState").pstate

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:  # noqa: N802
        gpu = self._gpu(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_mem)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:  # noqa: N802
        gpu = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=gpu.mem_used, total=gpu.mem_total, free=gpu.mem_total - gpu.mem_used)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: FakeGpu) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetCurrPcieLinkGeneration").pcie_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: FakeGpu) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetMaxPcieLinkGeneration").pcie_gen_max

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: FakeGpu) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetCurrPcieLinkWidth").pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: FakeGpu) -> int:  # noqa: N802
        return self._gpu(h, "nvmlDeviceGetMaxPcieLinkWidth").pcie_width_max

    def nvmlDeviceGetNvLinkState(self, h: FakeGpu, link: int) -> int:  # noqa: N802
        gpu = self._gpu(h, "nvmlDeviceGetNvLinkState")
        if link >= 18:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_DISABLED if link in gpu.nvlink_down else pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetFieldValues(self, h: FakeGpu, field_ids: list[int]) -> Any:  # noqa: N802
        gpu = self._gpu(h, "nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        # Fill through a plain view of the same buffer (pynvml's structs hook every attribute write).
        view = (_PlainFieldValue * len(field_ids)).from_buffer(values)
        for slot, field_id in zip(view, field_ids, strict=True):
            slot.fieldId = field_id
            value = gpu.fields.get(field_id)
            if value is None:
                slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif isinstance(value, float):
                slot.nvmlReturn, slot.valueType, slot.value.dVal = 0, pynvml.NVML_VALUE_TYPE_DOUBLE, value
            else:
                slot.nvmlReturn, slot.valueType = 0, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                slot.value.ullVal = value
        return values

    def nvmlEventSetCreate(self) -> object:  # noqa: N802
        if not self.events_supported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return object()

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, types: int, event_set: object) -> None:  # noqa: N802
        self._gpu(h, "nvmlDeviceRegisterEvents")

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> Any:  # noqa: N802
        if not self.pending_events:
            raise _error(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.pending_events.pop(0)
        return SimpleNamespace(device=self.gpus[index], eventType=pynvml.nvmlEventTypeXidCriticalError,
                               eventData=xid)

    def nvmlEventSetFree(self, event_set: object) -> None:  # noqa: N802
        pass


def healthy_fields() -> dict[int, int | float]:
    """Field values of a healthy H100 with 12 NVLinks (counters at zero, memory at 60 C)."""
    values: dict[int, int | float] = {pynvml.NVML_FI_DEV_MEMORY_TEMP: 60, pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0}
    for name in ("ECC_SBE_VOL_TOTAL", "ECC_DBE_VOL_TOTAL", "ECC_SBE_AGG_TOTAL", "ECC_DBE_AGG_TOTAL", "RETIRED_SBE",
                 "RETIRED_DBE", "RETIRED_PENDING", "REMAPPED_COR", "REMAPPED_UNC", "REMAPPED_PENDING",
                 "REMAPPED_FAILURE", "PCIE_REPLAY_COUNTER"):
        values[getattr(pynvml, f"NVML_FI_DEV_{name}")] = 0
    for link in range(12):
        for kind in ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY"):
            values[getattr(pynvml, f"NVML_FI_DEV_NVLINK_{kind}_ERROR_COUNT_L{link}")] = 0
    return values
