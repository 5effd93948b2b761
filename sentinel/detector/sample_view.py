"""What the detector reads of a telemetry sample: a projection of ``events.TelemetrySample``, decoded from the wire.

The agent's sample carries far more than the detector judges: every counter of every NIC port with its delta,
NVLink replay and recovery counters, memory, fans, ECC aggregates, collector errors. Decoding all of it into
Python objects cost more than half of the detector's CPU per message (issue 18, docs/benchmarks.md). These
structs name only the fields the detector reads, with the names, types and constraints of ``sentinel.events``
(a test holds them to it), so msgspec validates every value the detector uses and skips the rest without
building objects (the skipped part must still be valid JSON). The whole record is decoded and validated where it
is kept: the detector decodes each recorded sample in full (one per node per ``record_interval_s``) and
dead-letters it if it is invalid.

None of these structs can take part in a reference cycle, so they are not tracked by the garbage collector
(``gc=False``).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from sentinel import codec
from sentinel.events import (
    MAX_GPUS,
    MAX_NICS,
    MAX_NVLINKS,
    SCHEMA_VERSION,
    CounterValue,
    Finite,
    GpuState,
    HostReading,
    LogEvent,
    NodeName,
    PcieValue,
    TelemetrySample,
    Timestamp,
)

GpuIndex = Annotated[int, msgspec.Meta(ge=0, le=1023)]


class LinkView(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Of an ``NvLinkReading``: the CRC flit errors, and the replays and recoveries that follow them (the link
    rules watch their sums per GPU)."""

    link: Annotated[int, msgspec.Meta(ge=0, le=63)]
    crc_errors: CounterValue | None = None
    replay_errors: CounterValue | None = None
    recovery_errors: CounterValue | None = None


class GpuView(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Of a ``GpuReading``: what the windows store and the rules read."""

    index: GpuIndex
    uuid: Annotated[str, msgspec.Meta(max_length=128)] = ""
    pci_bus_id: Annotated[str, msgspec.Meta(max_length=64)] = ""
    state: GpuState = GpuState.OK
    temp_c: Finite | None = None
    power_w: Finite | None = None
    sm_clock_mhz: Finite | None = None
    util_gpu_pct: Finite | None = None
    throttle_reasons: CounterValue | None = None
    ecc_sbe_volatile: CounterValue | None = None
    ecc_dbe_volatile: CounterValue | None = None
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    pcie_replay: CounterValue | None = None
    pcie_link_width: PcieValue | None = None
    pcie_link_width_max: PcieValue | None = None
    nvlinks: Annotated[list[LinkView], msgspec.Meta(max_length=MAX_NVLINKS)] = msgspec.field(default_factory=list)


class NicCounters(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Of a ``NicReading``'s counters: the InfiniBand error counters the fabric rules watch and the byte counters
    the host model turns into network rates (None: the port has no such counter file)."""

    symbol_error: CounterValue | None = None
    link_error_recovery: CounterValue | None = None
    link_downed: CounterValue | None = None
    port_rcv_data: CounterValue | None = None  # InfiniBand, in 4-byte words
    port_xmit_data: CounterValue | None = None
    rx_bytes: CounterValue | None = None  # Ethernet statistics
    tx_bytes: CounterValue | None = None


class NicView(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    link_layer: Annotated[str, msgspec.Meta(max_length=32)] = "ethernet"
    counters: NicCounters = NicCounters()


class SampleView(msgspec.Struct, tag="telemetry", tag_field="type", frozen=True, kw_only=True, gc=False):
    """Of a ``TelemetrySample``: node, time, GPUs, NICs, host and jobs."""

    v: int = SCHEMA_VERSION
    node: NodeName
    ts: Timestamp
    gpus: Annotated[list[GpuView], msgspec.Meta(max_length=MAX_GPUS)] = msgspec.field(default_factory=list)
    nics: Annotated[list[NicView], msgspec.Meta(max_length=MAX_NICS)] = msgspec.field(default_factory=list)
    host: HostReading | None = None
    jobs: Annotated[list[Annotated[str, msgspec.Meta(min_length=1, max_length=128)]], msgspec.Meta(max_length=64)] = (
        msgspec.field(default_factory=list))


# A union with another tagged record, so that a message without the ``type`` tag is refused (a tagged struct
# decoded alone accepts one); a log record on the telemetry topic decodes and is then refused as the wrong kind.
_projection = codec.Projection(SampleView, LogEvent)


def decode_view(data: bytes) -> SampleView:
    """The detector's view of one telemetry message; ``CodecError`` (with a reason) when any field it reads is
    invalid, the message is not JSON, not a telemetry record or not of this schema version."""
    return _projection.decode(data)


def view_of(sample: TelemetrySample) -> SampleView:
    """The view of a sample held in memory (tests, benchmarks' warm-up): exactly what the wire would give."""
    return _projection.decode(codec.encode(sample))
