"""NVML collector: every GPU's identity, health counters and Xid events, through ``pynvml`` (nvidia-ml-py).

Reads only. The ``nvml`` module is the seam: production passes ``pynvml``, tests pass
``sentinel.testing.FakeNvml``, which mimics the same functions at the hardware boundary.

- No driver or no GPU: one clear log line, the collector disables itself, the agent keeps running.
- A GPU that stops answering (``NVMLError_GpuIsLost``, what follows Xid 79) is reported as ``state=lost``.
- Counters, ECC, retired pages, row remapping, PCIe replay and NVLink errors come in one batched
  ``nvmlDeviceGetFieldValues`` call per GPU; a field the GPU does not support stays ``None``.
- Each NVLink that reports a counter is also asked its state (``nvmlDeviceGetNvLinkState``: ``active``); the PCIe
  link's current and maximum generation and width come from their four calls.
- Xid events come from an NVML event set polled with a zero timeout (never blocks).
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

import pynvml

from sentinel.counters import counter_deltas
from sentinel.errors import CollectorError
from sentinel.events import GpuReading, GpuState, LogEvent, LogKind, NvLinkReading

log = logging.getLogger(__name__)

NVLINK_LINKS = 12  # NVML has per-link field ids for links 0-11

# field name on GpuReading -> NVML field id; read in one batch per GPU
COUNTER_FIELDS: dict[str, int] = {
    "ecc_sbe_volatile": pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
    "ecc_dbe_volatile": pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
    "ecc_sbe_aggregate": pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL,
    "ecc_dbe_aggregate": pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL,
    "retired_pages_sbe": pynvml.NVML_FI_DEV_RETIRED_SBE,
    "retired_pages_dbe": pynvml.NVML_FI_DEV_RETIRED_DBE,
    "retired_pages_pending": pynvml.NVML_FI_DEV_RETIRED_PENDING,
    "row_remap_correctable": pynvml.NVML_FI_DEV_REMAPPED_COR,
    "row_remap_uncorrectable": pynvml.NVML_FI_DEV_REMAPPED_UNC,
    "pcie_replay": pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
}
FLAG_FIELDS: dict[str, int] = {
    "row_remap_pending": pynvml.NVML_FI_DEV_REMAPPED_PENDING,
    "row_remap_failure": pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
}
VALUE_FIELDS: dict[str, int] = {
    "mem_temp_c": pynvml.NVML_FI_DEV_MEMORY_TEMP,
    "recovery_action": pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
}
NVLINK_FIELDS: dict[str, str] = {
    "crc_errors": "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L{}",
    "crc_data_errors": "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L{}",
    "replay_errors": "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L{}",
    "recovery_errors": "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L{}",
}
XID_EVENTS = pynvml.nvmlEventTypeXidCriticalError


def _field_ids() -> list[tuple[str, int]]:
    ids = [*COUNTER_FIELDS.items(), *FLAG_FIELDS.items(), *VALUE_FIELDS.items()]
    for link in range(NVLINK_LINKS):
        for name, pattern in NVLINK_FIELDS.items():
            ids.append((f"nvlink.{link}.{name}", getattr(pynvml, pattern.format(link))))
    return ids


FIELD_IDS = _field_ids()
FIELD_ID_LIST = [fid for _, fid in FIELD_IDS]


class _PlainFieldValue(ctypes.Structure):
    """Same memory layout as pynvml's ``c_nvmlFieldValue_t`` without its per-attribute Python hook, which made
    reading ~50 fields per GPU cost more than everything else the agent does (measured: bench agent)."""

    _fields_ = pynvml.c_nvmlFieldValue_t._fields_


def _plain(values: Any) -> Any:
    """View a ``c_nvmlFieldValue_t`` array as ``_PlainFieldValue``s (same buffer, no copy)."""
    if isinstance(values, ctypes.Array):
        return (_PlainFieldValue * len(values)).from_buffer(values)
    return values


def _field_value(field: Any) -> float | int | None:
    if field.nvmlReturn != pynvml.NVML_SUCCESS:
        return None
    value_type = field.valueType
    if value_type == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return float(field.value.dVal)
    if value_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return int(field.value.uiVal)
    if value_type == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        return int(field.value.siVal)
    if value_type == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return int(field.value.sllVal)
    return int(field.value.ullVal)


class NvmlCollector:
    name = "nvml"

    def __init__(self, nvml: Any = pynvml, node: str = "localhost", xid_events: bool = True) -> None:
        self.nvml = nvml
        self.node = node
        self.enabled = False
        self.disabled_reason = ""
        self._handles: list[Any] = []
        self._identity: list[tuple[str, str, str]] = []  # (uuid, pci bus id, model) per index
        self._previous: dict[int, dict[str, int | None]] = {}
        self._events: Any = None
        self._xid_events = xid_events
        self._start()

    def _start(self) -> None:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            self.disabled_reason = f"NVML unavailable ({exc}): no NVIDIA driver or GPU; nvml collector disabled"
            log.warning(self.disabled_reason)
            return
        if count == 0:
            self.disabled_reason = "NVML reports no GPU; nvml collector disabled"
            log.warning(self.disabled_reason)
            return
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self._handles.append(handle)
            try:
                self._identity.append((_text(nvml.nvmlDeviceGetUUID(handle)),
                                       _text(nvml.nvmlDeviceGetPciInfo(handle).busId),
                                       _text(nvml.nvmlDeviceGetName(handle))))
            except nvml.NVMLError as exc:  # lost before we started (Xid 79): report it as lost, keep the others
                log.warning("GPU %d does not answer at start (%s); reported as lost", index, exc)
                self._identity.append(("", "", ""))
        if self._xid_events:
            self._register_events()
        self.enabled = True

    def _register_events(self) -> None:
        nvml = self.nvml
        try:
            self._events = nvml.nvmlEventSetCreate()
            for handle in self._handles:
                nvml.nvmlDeviceRegisterEvents(handle, XID_EVENTS, self._events)
        except nvml.NVMLError as exc:  # not supported on every GPU / driver: the kernel log still has the Xids
            log.warning("NVML Xid events unavailable (%s); relying on the kernel log", exc)
            self._events = None

    def read(self) -> list[GpuReading]:
        if not self.enabled:
            return []
        return [self._read_gpu(index, handle) for index, handle in enumerate(self._handles)]

    def _read_gpu(self, index: int, handle: Any) -> GpuReading:
        nvml = self.nvml
        uuid, pci, model = self._identity[index]
        try:
            values = self._basic(handle)
            fields = _plain(nvml.nvmlDeviceGetFieldValues(handle, FIELD_ID_LIST))
        except nvml.NVMLError_GpuIsLost:
            return GpuReading(index=index, uuid=uuid, pci_bus_id=pci, model=model, state=GpuState.LOST)
        except nvml.NVMLError as exc:
            raise CollectorError(f"GPU {index}: {exc}") from None
        by_name = {name: _field_value(f) for (name, _), f in zip(FIELD_IDS, fields, strict=True)}
        counters = {name: _counter(by_name[name]) for name in COUNTER_FIELDS}
        deltas = counter_deltas(self._previous.get(index), counters)
        self._previous[index] = counters
        nvlinks = []
        for link in range(NVLINK_LINKS):
            errors: dict[str, Any] = {k: _counter(by_name[f"nvlink.{link}.{k}"]) for k in NVLINK_FIELDS}
            if any(v is not None for v in errors.values()):
                nvlinks.append(NvLinkReading(link=link, active=self._link_state(handle, link), **errors))
        flags = {name: (None if by_name[name] is None else bool(by_name[name])) for name in FLAG_FIELDS}
        recovery = by_name["recovery_action"]
        readings: dict[str, Any] = {**values, **counters, **flags}
        return GpuReading(
            index=index, uuid=uuid, pci_bus_id=pci, model=model, **readings,
            mem_temp_c=_finite(by_name["mem_temp_c"]),
            recovery_action=int(recovery) if recovery is not None and 0 <= recovery <= 255 else None,
            nvlinks=nvlinks, deltas=deltas)

    def _link_state(self, handle: Any, link: int) -> bool | None:
        try:
            return bool(self.nvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED)
        except self.nvml.NVMLError_GpuIsLost:
            raise
        except self.nvml.NVMLError:  # not supported, or the link is not present
            return None

    def _basic(self, handle: Any) -> dict[str, Any]:
        """Readings outside the field-value API; each unsupported one stays None."""
        nvml = self.nvml
        out: dict[str, Any] = {}

        def get(key: str, fn: Any, *args: Any, scale: float = 1.0) -> Any:
            try:
                value = fn(handle, *args)
            except nvml.NVMLError_NotSupported:
                return None
            if key:
                out[key] = _finite(value * scale if isinstance(value, (int, float)) else None)
            return value

        get("temp_c", nvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)
        get("power_w", nvml.nvmlDeviceGetPowerUsage, scale=0.001)  # mW
        get("power_limit_w", nvml.nvmlDeviceGetEnforcedPowerLimit, scale=0.001)
        get("sm_clock_mhz", nvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM)
        get("mem_clock_mhz", nvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM)
        get("fan_pct", nvml.nvmlDeviceGetFanSpeed)
        reasons = get("", nvml.nvmlDeviceGetCurrentClocksEventReasons)
        out["throttle_reasons"] = _counter(reasons)
        pstate = get("", nvml.nvmlDeviceGetPerformanceState)
        out["pstate"] = pstate if isinstance(pstate, int) and 0 <= pstate <= 32 else None
        util = get("", nvml.nvmlDeviceGetUtilizationRates)
        out["util_gpu_pct"] = _finite(util.gpu) if util is not None else None
        out["util_mem_pct"] = _finite(util.memory) if util is not None else None
        for key, fn in (("pcie_link_gen", nvml.nvmlDeviceGetCurrPcieLinkGeneration),
                        ("pcie_link_gen_max", nvml.nvmlDeviceGetMaxPcieLinkGeneration),
                        ("pcie_link_width", nvml.nvmlDeviceGetCurrPcieLinkWidth),
                        ("pcie_link_width_max", nvml.nvmlDeviceGetMaxPcieLinkWidth)):
            value = get("", fn)
            out[key] = value if isinstance(value, int) and 0 <= value <= 64 else None
        memory = get("", nvml.nvmlDeviceGetMemoryInfo)
        out["mem_used_bytes"] = _counter(memory.used) if memory is not None else None
        out["mem_total_bytes"] = _counter(memory.total) if memory is not None else None
        return out

    def read_events(self, now: float) -> list[LogEvent]:
        """Xid events waiting in the event set (zero timeout: returns at once when there are none)."""
        if self._events is None:
            return []
        nvml, out = self.nvml, []
        for _ in range(1000):  # bounded: an event storm cannot stall the agent
            try:
                data = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError_Timeout:
                break
            except nvml.NVMLError as exc:
                raise CollectorError(f"NVML event wait failed: {exc}") from None
            index = next((i for i, h in enumerate(self._handles) if h == data.device), None)
            pci = self._identity[index][1] if index is not None else None
            xid = int(data.eventData)
            out.append(LogEvent(node=self.node, ts=now, kind=LogKind.XID, xid=xid, pci_bus_id=pci, gpu_index=index,
                                message=f"NVML Xid critical error event: Xid {xid} on GPU {index}",
                                attrs={"source": "nvml"}))
        return out

    def close(self) -> None:
        if self.enabled:
            try:
                if self._events is not None:
                    self.nvml.nvmlEventSetFree(self._events)
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError as exc:
                log.debug("NVML shutdown: %s", exc)
            self.enabled = False


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _finite(value: Any) -> float | None:
    if value is None or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and abs(value) < 1e300 else None


def _counter(value: Any) -> int | None:
    if value is None or isinstance(value, float) and value != value:
        return None
    value = int(value)
    return value if 0 <= value < 2**63 else None
