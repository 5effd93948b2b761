"""dcgm-exporter collector: the GPU health a node's dcgm-exporter already publishes, scraped from its /metrics.

Reads only. ``fetch(url, timeout_s) -> str`` is the seam: production uses urllib, tests serve recorded
exposition text from a real local HTTP server. The text is parsed by ``prometheus_client``'s parser.

- Samples are grouped per GPU by the ``gpu`` label (the index). Identity comes from ``UUID`` (``uuid`` or
  ``gpu_uuid`` in other exporter versions), ``pci_bus_id`` and ``modelName``; any of them may be missing.
- ``FIELDS`` maps DCGM field names (the legacy spellings the exporter's CSVs use, plus the DCGM 4 renames)
  to ``GpuReading`` fields; every other metric is ignored.
- A value that cannot be trusted stays ``None``: NaN/inf, DCGM's "blank" sentinels (not supported, not
  found), negative or oversized counters, a pstate or recovery action out of range.
- Rows for a MIG slice (non-empty ``GPU_I_ID``) are skipped: they describe part of a GPU, not the GPU.
- Unreachable endpoint, HTTP error, timeout or text the parser rejects: ``CollectorError`` naming the URL.
  A valid exposition without DCGM GPU samples gives an empty list.
"""

from __future__ import annotations

import http.client
import math
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from sentinel.counters import counter_deltas
from sentinel.errors import CollectorError
from sentinel.events import GpuReading, NvLinkReading

DEFAULT_URL = "http://127.0.0.1:9400/metrics"
MAX_BODY_BYTES = 32 * 1024 * 1024  # a scrape of 8 GPUs with every field is ~1 MiB; more is not an exporter
MIB = 1024 * 1024

GAUGE, COUNTER, CODE, FLAG, MEBIBYTES = "gauge", "counter", "code", "flag", "mebibytes"

# DCGM field -> (GpuReading field, kind). COUNTER: monotonic, gets a delta. CODE: non-negative int, no delta
# (a bitmask or an enum). FLAG: 0/1. MEBIBYTES: framebuffer MiB, assembled into bytes below.
# DCGM_FI_DEV_XID_ERRORS (DCGM 4: DCGM_FI_DEV_XID_ERROR) is deliberately absent: it holds the *last* Xid
# value and never resets, so counting Xids from it double-counts a repeat and misses a burst of different
# ones. Xids come from the kernel log and NVML events.
FIELDS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", GAUGE),
    "DCGM_FI_DEV_MEMORY_TEMP": ("mem_temp_c", GAUGE),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", GAUGE),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", GAUGE),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", GAUGE),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", GAUGE),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu_pct", GAUGE),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_mem_pct", GAUGE),
    "DCGM_FI_DEV_FAN_SPEED": ("fan_pct", GAUGE),
    "DCGM_FI_DEV_FB_USED": ("fb_used", MEBIBYTES),
    "DCGM_FI_DEV_FB_FREE": ("fb_free", MEBIBYTES),
    "DCGM_FI_DEV_FB_RESERVED": ("fb_reserved", MEBIBYTES),
    "DCGM_FI_DEV_FB_TOTAL": ("fb_total", MEBIBYTES),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle_reasons", CODE),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("throttle_reasons", CODE),  # DCGM 3.3 rename
    "DCGM_FI_DEV_PSTATE": ("pstate", CODE),
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": ("recovery_action", CODE),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_sbe_volatile", COUNTER),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_dbe_volatile", COUNTER),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_sbe_aggregate", COUNTER),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_dbe_aggregate", COUNTER),
    "DCGM_FI_DEV_RETIRED_SBE": ("retired_pages_sbe", COUNTER),
    "DCGM_FI_DEV_RETIRED_DBE": ("retired_pages_dbe", COUNTER),
    "DCGM_FI_DEV_RETIRED_PENDING": ("retired_pages_pending", COUNTER),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("row_remap_correctable", COUNTER),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("row_remap_uncorrectable", COUNTER),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("row_remap_pending", FLAG),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("row_remap_failure", FLAG),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replay", COUNTER),
    "DCGM_FI_DEV_PCIE_LINK_GEN": ("pcie_link_gen", CODE),  # field ids 235-238 (dcgm_fields.h)
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": ("pcie_link_gen_max", CODE),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": ("pcie_link_width", CODE),
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": ("pcie_link_width_max", CODE),
    # DCGM 4 "field naming standard" spellings of the same field ids
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS": ("temp_c", GAUGE),
    "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS": ("mem_temp_c", GAUGE),
    "DCGM_FI_DEV_BOARD_POWER_WATTS": ("power_w", GAUGE),
    "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS": ("power_limit_w", GAUGE),
    "DCGM_FI_DEV_GPU_UTIL_RATIO": ("util_gpu_pct", GAUGE),  # still percent despite the name
    "DCGM_FI_DEV_GPU_PSTATE": ("pstate", CODE),
    "DCGM_FI_DEV_GPU_RECOVERY_ACTION": ("recovery_action", CODE),
    "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL": ("retired_pages_sbe", COUNTER),
    "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL": ("retired_pages_dbe", COUNTER),
    "DCGM_FI_DEV_PAGE_RETIRED_PENDING": ("retired_pages_pending", COUNTER),
    "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL": ("row_remap_correctable", COUNTER),
    "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL": ("row_remap_uncorrectable", COUNTER),
    "DCGM_FI_DEV_ROW_REMAP_FAILED": ("row_remap_failure", FLAG),
    "DCGM_FI_DEV_PCIE_REPLAY_TOTAL": ("pcie_replay", COUNTER),
}
CODE_LIMITS = {"throttle_reasons": 2**63 - 1, "pstate": 32, "recovery_action": 255, "pcie_link_gen": 64,
               "pcie_link_gen_max": 64, "pcie_link_width": 64, "pcie_link_width_max": 64}
COUNTER_FIELDS = sorted({name for name, kind in FIELDS.values() if kind == COUNTER})

# Per-link NVLink error counters: legacy ..._ERROR_COUNT_L<n>, DCGM 4 ..._ERROR_L<n>_TOTAL. The GPU-wide totals
# (..._COUNT_TOTAL / ..._ERROR_TOTAL) count for a link only on a link-entity row (an ``nvlink`` label).
NVLINK_KINDS = {"CRC_FLIT": "crc_errors", "CRC_DATA": "crc_data_errors", "REPLAY": "replay_errors",
                "RECOVERY": "recovery_errors"}
NVLINK_FIELD = re.compile(
    r"DCGM_FI_DEV_NVLINK_(CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR_(?:COUNT_L(\d+)|L(\d+)_TOTAL|(COUNT_TOTAL|TOTAL))"
)

# DCGM writes these instead of a value it could not read (blank, not found, not supported, not permissioned...).
INT32_BLANK, INT64_BLANK, FP64_BLANK = 0x7FFFFFF0, 0x7FFFFFFFFFFFFFF0, 2.0**47


def _is_blank(value: float) -> bool:
    return INT32_BLANK <= value <= 0x7FFFFFFF or FP64_BLANK <= value < FP64_BLANK + 16 or value >= INT64_BLANK


def _number(value: float) -> float | None:
    if (isinstance(value, float) and not math.isfinite(value)) or _is_blank(value):
        return None
    return value


def _count(value: float, limit: int = 2**63 - 1) -> int | None:
    """A non-negative integer reading; exact when the parser kept the sample as an int."""
    number = _number(value)
    if number is None or number < 0:
        return None
    whole = value if isinstance(value, int) else int(number)
    return whole if whole <= limit else None


def http_fetch(url: str, timeout_s: float) -> str:
    """GET ``url`` directly, never through a proxy: the exporter runs on this node, and an agent started
    with ``http_proxy`` in its environment would otherwise send the scrape to the proxy."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout_s) as response:
        body: bytes = response.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise CollectorError(f"dcgm-exporter at {url} returned more than {MAX_BODY_BYTES} bytes")
    return body.decode("utf-8", errors="replace")


@dataclass
class _Gpu:
    uuid: str = ""
    pci_bus_id: str = ""
    model: str = ""
    values: dict[str, float] = field(default_factory=dict)  # GpuReading field -> raw sample value
    links: dict[int, dict[str, float]] = field(default_factory=dict)


class DcgmCollector:
    name = "dcgm"

    def __init__(
        self, url: str = DEFAULT_URL, timeout_s: float = 2.0, fetch: Callable[[str, float], str] | None = None
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.fetch = fetch or http_fetch
        self._previous: dict[str, dict[str, int | None]] = {}  # counters per GPU (uuid, else index)

    def read(self) -> list[GpuReading]:
        try:
            text = self.fetch(self.url, self.timeout_s)
        except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError/HTTPError/timeouts are OSError
            raise CollectorError(f"cannot scrape dcgm-exporter at {self.url}: {exc}") from exc
        try:
            families = list(text_string_to_metric_families(text))
        except ValueError as exc:
            raise CollectorError(f"dcgm-exporter at {self.url} returned text that is not exposition: {exc}") from exc
        gpus: dict[int, _Gpu] = {}
        for family in families:  # family.name, not sample.name: the parser appends _total to counter samples
            nvlink = NVLINK_FIELD.fullmatch(family.name)
            mapped = FIELDS.get(family.name)
            if mapped is None and nvlink is None:
                continue
            for sample in family.samples:
                gpu = _gpu_for(gpus, sample.labels)
                if gpu is None:
                    continue
                if mapped is not None:
                    gpu.values.setdefault(mapped[0], sample.value)
                elif nvlink is not None:
                    _add_link_value(gpu, nvlink, sample.labels, sample.value)
        return [self._reading(index, gpus[index]) for index in sorted(gpus)]

    def _reading(self, index: int, gpu: _Gpu) -> GpuReading:
        values: dict[str, Any] = {}
        for name, kind in set(FIELDS.values()):
            raw = gpu.values.get(name)
            if raw is None or kind == MEBIBYTES:
                continue
            if kind == GAUGE:
                number = _number(raw)
                values[name] = None if number is None else round(float(number), 3)
            elif kind == FLAG:
                flag = _count(raw)
                values[name] = None if flag is None else flag != 0
            else:
                values[name] = _count(raw, CODE_LIMITS.get(name, 2**63 - 1))
        values.update(_memory(gpu.values))
        counters = {name: values.get(name) for name in COUNTER_FIELDS}
        key = gpu.uuid or f"index:{index}"
        previous = self._previous.get(key) or {}
        deltas = counter_deltas(previous, counters)
        # a counter missing from this scrape keeps its last value, so an increase across the gap still shows
        self._previous[key] = {**previous, **{k: v for k, v in counters.items() if v is not None}}
        nvlinks = []
        for link in sorted(gpu.links):
            errors: dict[str, Any] = {attr: _count(raw) for attr, raw in gpu.links[link].items()}
            if any(value is not None for value in errors.values()):
                nvlinks.append(NvLinkReading(link=link, **errors))
        return GpuReading(
            index=index,
            uuid=gpu.uuid,
            pci_bus_id=gpu.pci_bus_id,
            model=gpu.model,
            nvlinks=nvlinks,
            deltas=deltas,
            **values,
        )


def _gpu_for(gpus: dict[int, _Gpu], labels: dict[str, str]) -> _Gpu | None:
    """The GPU a sample belongs to, or None for a MIG slice, an NVSwitch, or a row without a GPU index."""
    index_text = labels.get("gpu", "")
    if not index_text.isdecimal() or int(index_text) > 1023 or labels.get("GPU_I_ID") or "nvswitch" in labels:
        return None
    gpu = gpus.setdefault(int(index_text), _Gpu())
    gpu.uuid = gpu.uuid or (labels.get("UUID") or labels.get("uuid") or labels.get("gpu_uuid") or "")[:128]
    gpu.pci_bus_id = gpu.pci_bus_id or labels.get("pci_bus_id", "")[:64]
    gpu.model = gpu.model or (labels.get("modelName") or labels.get("model_name") or "")[:128]
    return gpu


def _add_link_value(gpu: _Gpu, match: re.Match[str], labels: dict[str, str], value: float) -> None:
    kind, legacy_link, new_link, total = match.groups()
    link_text = labels.get("nvlink", "") if total else (legacy_link or new_link)
    if link_text.isdecimal() and int(link_text) <= 63:
        gpu.links.setdefault(int(link_text), {}).setdefault(NVLINK_KINDS[kind], value)


def _memory(raw: dict[str, float]) -> dict[str, int | None]:
    """Framebuffer MiB -> bytes. Total is FB_TOTAL, else used + free (+ reserved, which newer drivers split out)."""
    fb = {name: _count(value) for name, value in raw.items() if name.startswith("fb_")}
    used, free, total = fb.get("fb_used"), fb.get("fb_free"), fb.get("fb_total")
    if total is None and used is not None and free is not None:
        total = used + free + (fb.get("fb_reserved") or 0)
    return {"mem_used_bytes": _bytes(used), "mem_total_bytes": _bytes(total)}


def _bytes(mebibytes: int | None) -> int | None:
    return mebibytes * MIB if mebibytes is not None and mebibytes * MIB < 2**63 else None
