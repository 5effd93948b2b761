"""The detector's view of a telemetry sample: the record's own fields, validated alike, the rest skipped."""

from __future__ import annotations

import typing

import msgspec
import pytest
from hypothesis import given, settings

from sentinel import codec
from sentinel.actuator.sealed import inside
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.detector.sample_view import GpuView, LinkView, NicCounters, NicView, SampleView, decode_view
from sentinel.detector.service import Detector
from sentinel.errors import CodecError
from sentinel.events import (
    CounterValue,
    DeadLetter,
    Finding,
    GpuReading,
    GpuState,
    LogEvent,
    LogKind,
    NicReading,
    NvLinkReading,
    TelemetrySample,
)
from sentinel.obs.metrics import Metrics
from sentinel.store.repository import Repository
from sentinel.transport import DEAD_LETTERS, FINDINGS, TELEMETRY
from sentinel.transport.memory import MemoryTransport
from tests.codec_strategies import samples


def _hints(kind: type) -> dict[str, object]:
    return typing.get_type_hints(kind, include_extras=True)


@pytest.mark.parametrize(("view", "record"), [(SampleView, TelemetrySample), (GpuView, GpuReading),
                                              (NicView, NicReading), (LinkView, NvLinkReading)])
def test_every_field_of_a_view_is_the_records_field_with_the_same_type(view: type, record: type) -> None:
    """Same names, types and constraints (so the view validates what it reads exactly as the record does)."""
    record_hints = _hints(record)
    for name, hint in _hints(view).items():
        if (view, name) in {(SampleView, "gpus"), (SampleView, "nics"), (GpuView, "nvlinks"), (NicView, "counters")}:
            continue  # views of their own, checked by the other cases
        assert name in record_hints, f"{view.__name__}.{name} is not a field of {record.__name__}"
        assert hint == record_hints[name], f"{view.__name__}.{name}: {hint} != {record_hints[name]}"
    counters = _hints(NicReading)["counters"]  # Annotated[dict[Key, CounterValue], Meta(max_length=...)]
    counter_value = typing.get_args(typing.get_args(counters)[0])[1]
    assert counter_value == CounterValue
    assert all(hint == CounterValue | None for hint in _hints(NicCounters).values())


@settings(max_examples=200, deadline=None)
@given(samples)
def test_the_view_holds_the_values_of_the_sample(sample: TelemetrySample) -> None:
    view = decode_view(codec.encode(sample))
    assert (view.node, view.ts, view.host, view.jobs) == (sample.node, sample.ts, sample.host, sample.jobs)
    assert len(view.gpus) == len(sample.gpus)
    for seen, gpu in zip(view.gpus, sample.gpus, strict=True):
        for field in GpuView.__struct_fields__:
            if field != "nvlinks":
                assert getattr(seen, field) == getattr(gpu, field), field
        assert [link.crc_errors for link in seen.nvlinks] == [link.crc_errors for link in gpu.nvlinks]
    for seen_nic, nic in zip(view.nics, sample.nics, strict=True):
        assert (seen_nic.name, seen_nic.link_layer) == (nic.name, nic.link_layer)
        for counter in NicCounters.__struct_fields__:
            assert getattr(seen_nic.counters, counter) == nic.counters.get(counter)


def _wire(**gpu: object) -> bytes:
    return codec.encode(TelemetrySample(node="gpu-01", ts=1.0, gpus=[GpuReading(index=0, **gpu)]))  # type: ignore[arg-type]


@pytest.mark.parametrize(("data", "reason"), [
    (_wire(temp_c=50.0).replace(b'"temp_c":50.0', b'"temp_c":"hot"'), "invalid record"),
    (_wire(pcie_replay=3).replace(b'"pcie_replay":3', b'"pcie_replay":-3'), "invalid record"),
    (_wire().replace(b'"type":"telemetry",', b""), "missing required field `type`"),
    (_wire().replace(b'"v":1', b'"v":2'), "unsupported schema version"),
    (codec.encode(LogEvent(node="gpu-01", ts=1.0, kind=LogKind.XID, message="x")), "expected a SampleView record"),
    (b'{"type":"telemetry","node":"gpu-01","ts":1.0,"gpus":[{"index":0}]', "malformed message"),
    (_wire().replace(b'"node":"gpu-01"', b'"node":"gpu 01; rm -rf"'), "invalid record"),
])
def test_a_bad_value_in_a_field_the_view_reads_is_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(CodecError, match=reason):
        decode_view(data)


def test_a_bad_value_the_view_skips_is_judged_then_dead_lettered_when_recorded(repo: Repository) -> None:
    """A lost GPU in a sample whose NIC delta is invalid: the finding goes out (the view read valid fields), and
    the record, refused in full when the detector stores it, is dead-lettered with its reason, not stored."""
    transport = MemoryTransport()
    detector = Detector(transport, repo, from_mapping({}).detector, Metrics(), ManualClock(100.0))
    findings, letters = transport.consumer("f", [FINDINGS]), transport.consumer("d", [DEAD_LETTERS])
    lost = TelemetrySample(node="gpu-01", ts=1.0, gpus=[GpuReading(index=0, state=GpuState.LOST)],
                           nics=[NicReading(name="eth0", deltas={"rx_bytes": 5})])
    bad = codec.encode(lost).replace(b'"deltas":{"rx_bytes":5}', b'"deltas":{"rx_bytes":-5}')
    with pytest.raises(CodecError):
        codec.decode(bad)
    transport.publish(TELEMETRY, "gpu-01", bad)
    assert detector.step() == 1
    assert [inside(m.value, Finding).rule for m in findings.poll(10)] == ["gpu-lost"]
    [letter] = [codec.decode_as(m.value, DeadLetter) for m in letters.poll(10)]
    assert "deltas" in letter.reason and letter.payload == bad
    assert repo.table("nodes", "name") == []
    transport.publish(TELEMETRY, "gpu-01", codec.encode(msgspec.structs.replace(lost, ts=2.0)))
    detector.step()
    assert [n["name"] for n in repo.table("nodes", "name")] == ["gpu-01"]  # the next valid sample is recorded
    assert letters.poll(10) == []
