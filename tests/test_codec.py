"""The codec is the gate: every valid record round-trips, and any other input raises ``CodecError`` only."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import codec
from sentinel.errors import CodecError
from sentinel.events import (
    SCHEMA_VERSION,
    ActionKind,
    ActionResult,
    Command,
    DeadLetter,
    Decision,
    Finding,
    FindingClass,
    GpuReading,
    Incident,
    IncidentStatus,
    LogEvent,
    LogKind,
    Mode,
    Recommendation,
    Severity,
    SignedCommand,
    Step,
    StepStatus,
    TelemetrySample,
)
from tests.codec_strategies import (
    FAST,
    TAGS,
    WIRE_TYPES,
    assert_rejected,
    bad_node_names,
    commands,
    decisions,
    decode_outcome,
    findings,
    float_paths,
    incidents,
    json_values,
    log_events,
    raw,
    records,
    required_fields,
    results,
    samples,
    set_path,
    wrong_typed,
)

# ----- round trip --------------------------------------------------------------------------------------------


@FAST
@given(records)
def test_every_valid_record_round_trips_unchanged(record: msgspec.Struct) -> None:
    assert codec.decode(codec.encode(record)) == record


@FAST
@given(samples)
def test_decode_as_returns_the_sample_it_was_given(sample: TelemetrySample) -> None:
    decoded = codec.decode_as(codec.encode(sample), TelemetrySample)
    assert type(decoded) is TelemetrySample and decoded == sample


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_decode_accepts_any_bytes_like_buffer(wrap: type) -> None:
    record = LogEvent(node="gpu-01", ts=1.0, kind=LogKind.XID, message="NVRM: Xid 79", xid=79)
    assert codec.decode(wrap(codec.encode(record))) == record


# ----- nothing but CodecError --------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.binary())
def test_arbitrary_bytes_raise_only_codec_error(data: bytes) -> None:
    errors = decode_outcome(data)  # any exception other than CodecError fails inside
    assert all(isinstance(e, CodecError) and e.reason for e in errors)


@FAST
@given(json_values)
def test_arbitrary_json_values_raise_only_codec_error(value: Any) -> None:
    assert_rejected(json.dumps(value).encode())


@FAST
@given(records, st.data())
def test_a_missing_required_field_is_rejected(record: msgspec.Struct, data: st.DataObject) -> None:
    obj = raw(record)
    field = data.draw(st.sampled_from(required_fields(type(record))))
    del obj[field]
    errors = decode_outcome(json.dumps(obj).encode())
    assert errors and field in errors[0].reason


@FAST
@given(records, st.text(min_size=1, max_size=20), json_values)
def test_an_unknown_extra_field_is_rejected(record: msgspec.Struct, key: str, value: Any) -> None:
    obj = raw(record)
    if key in obj:
        key = key + "_unknown"
    obj[key] = value
    assert_rejected(json.dumps(obj).encode())


@FAST
@given(records, st.data(), wrong_typed)
def test_a_field_of_the_wrong_type_is_rejected(record: msgspec.Struct, data: st.DataObject, value: Any) -> None:
    obj = raw(record)
    field = data.draw(st.sampled_from(sorted(k for k in obj if k != "type")))
    obj[field] = value
    assert_rejected(json.dumps(obj).encode())


@FAST
@given(records, st.one_of(st.text(max_size=20).filter(lambda t: t not in TAGS), st.integers(), st.none()))
def test_an_unknown_tag_is_rejected(record: msgspec.Struct, tag: Any) -> None:
    obj = raw(record)
    obj["type"] = tag
    assert_rejected(json.dumps(obj).encode())


@FAST
@given(records)
def test_a_record_without_its_tag_is_rejected_by_decode(record: msgspec.Struct) -> None:
    obj = raw(record)
    del obj["type"]
    with pytest.raises(CodecError) as info:
        codec.decode(json.dumps(obj).encode())
    assert "type" in info.value.reason


@FAST
@given(st.one_of(samples, log_events, findings, incidents, decisions, commands, results), bad_node_names)
def test_a_bad_node_name_is_rejected(record: msgspec.Struct, name: str) -> None:
    obj = raw(record)
    obj["node"] = name
    errors = assert_rejected(json.dumps(obj).encode())
    assert "node" in errors[0].reason


@FAST
@given(records, st.data(), st.sampled_from([b"1e999", b"-1e999", b"NaN", b"Infinity", b"-Infinity", b"nan", b"inf"]))
def test_a_non_finite_number_in_any_float_field_is_rejected(
    record: msgspec.Struct, data: st.DataObject, literal: bytes
) -> None:
    obj = raw(record)
    path = data.draw(st.sampled_from(float_paths(obj)))
    set_path(obj, path, "__NON_FINITE__")
    assert_rejected(json.dumps(obj).encode().replace(b'"__NON_FINITE__"', literal))


@FAST
@given(st.floats(min_value=1e300, exclude_min=True) | st.floats(max_value=-1e300, exclude_max=True))
def test_a_reading_beyond_the_finite_bound_is_rejected(value: float) -> None:
    obj = raw(TelemetrySample(node="gpu-01", ts=1.0, gpus=[GpuReading(index=0)]))
    obj["gpus"][0]["temp_c"] = value
    assert_rejected(json.dumps(obj).encode())


@FAST
@given(records.filter(lambda r: not isinstance(r, TelemetrySample)))
def test_decode_as_telemetry_rejects_every_other_record_type(record: msgspec.Struct) -> None:
    with pytest.raises(CodecError) as info:
        codec.decode_as(codec.encode(record), TelemetrySample)
    assert info.value.reason


# ----- specific rejections -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 2, 99])
@pytest.mark.parametrize("kind", WIRE_TYPES, ids=lambda k: k.__name__)
def test_a_record_of_another_schema_version_is_rejected_naming_the_version(kind: type, version: int) -> None:
    example = {
        TelemetrySample: TelemetrySample(node="n1", ts=1.0),
        LogEvent: LogEvent(node="n1", ts=1.0, kind=LogKind.OTHER, message="m"),
        Finding: Finding(
            id="f",
            node="n1",
            ts=1.0,
            observed_ts=1.0,
            kind=FindingClass.GPU_XID,
            rule="r",
            severity=Severity.INFO,
            recommendation=Recommendation.NONE,
            confidence=0.5,
            summary="s",
        ),
        Incident: Incident(
            id="i",
            node="n1",
            opened_ts=1.0,
            updated_ts=1.0,
            status=IncidentStatus.OPEN,
            severity=Severity.INFO,
            kind=FindingClass.GPU_XID,
            summary="s",
        ),
        Decision: Decision(
            id="d", incident_id="i", node="n1", ts=1.0, action=ActionKind.NONE, mode=Mode.OBSERVE, reason="r"
        ),
        Command: Command(
            id="c",
            decision_id="d",
            incident_id="i",
            node="n1",
            action=ActionKind.DRAIN_REQUEUE,
            ts=1.0,
            expires_ts=2.0,
            drain_reason="sentinel: x",
        ),
        SignedCommand: SignedCommand(key_id="0" * 16, nonce="1" * 32, expires_ts=2.0, payload=b"{}",
                                     signature="2" * 64),
        ActionResult: ActionResult(
            id="a", command_id="c", incident_id="i", node="n1", ts=1.0, step=Step.DRAIN, status=StepStatus.OK
        ),
        DeadLetter: DeadLetter(ts=1.0, reason="r", source_topic="t"),
    }[kind]
    obj = raw(example)
    assert obj["v"] == SCHEMA_VERSION
    obj["v"] = version
    with pytest.raises(CodecError) as info:
        codec.decode(json.dumps(obj).encode())
    assert "version" in info.value.reason and str(version) in info.value.reason


def test_a_message_over_the_size_limit_is_rejected_before_parsing() -> None:
    with pytest.raises(CodecError) as info:
        codec.decode(b" " * (codec.MAX_MESSAGE_BYTES + 1))
    assert "limit" in info.value.reason


@pytest.mark.parametrize("data", ["{}", None, 42, ["not", "bytes"]])
def test_input_that_is_not_bytes_is_rejected(data: Any) -> None:
    with pytest.raises(CodecError) as info:
        codec.decode(data)
    assert "expected bytes" in info.value.reason


def test_deeply_nested_json_is_rejected_without_recursion_error() -> None:
    assert_rejected(b'{"a":' * 100_000)


def test_a_string_where_a_number_belongs_is_rejected() -> None:
    errors = assert_rejected(b'{"type":"telemetry","node":"n1","ts":"1"}')
    assert "ts" in errors[0].reason


def test_an_optional_reading_may_be_null_but_never_nan() -> None:
    ok = codec.decode(b'{"type":"telemetry","node":"n1","ts":1,"gpus":[{"index":0,"temp_c":null}]}')
    assert isinstance(ok, TelemetrySample) and ok.gpus[0].temp_c is None
    assert_rejected(b'{"type":"telemetry","node":"n1","ts":1,"gpus":[{"index":0,"temp_c":NaN}]}')


@pytest.mark.parametrize("name", [b"n1\\n", b"n1\\r\\n", b"\\nn1"])
def test_a_node_name_with_a_newline_at_either_end_is_rejected(name: bytes) -> None:
    """Regression: the pattern ended in `$`, which also matches before a trailing newline."""
    assert_rejected(b'{"type":"telemetry","node":"' + name + b'","ts":1}')


def test_a_job_id_with_a_trailing_newline_is_rejected() -> None:
    obj = raw(
        ActionResult(
            id="a", command_id="c", incident_id="i", node="n1", ts=1.0, step=Step.REQUEUE, status=StepStatus.OK
        )
    )
    obj["job_ids"] = ["1234\n"]
    assert_rejected(json.dumps(obj).encode())


@pytest.mark.parametrize("value", [2**63, 2**64, 10**30])
def test_a_counter_beyond_int64_is_rejected(value: int) -> None:
    """Regression: counters were unbounded, so a 65-bit value passed the codec and overflowed numpy and SQL."""
    assert_rejected(b'{"type":"telemetry","node":"n1","ts":1,"seq":%d}' % value)


def test_the_largest_int64_counter_is_accepted() -> None:
    record = TelemetrySample(node="n1", ts=1.0, seq=2**63 - 1, gpus=[GpuReading(index=0, ecc_dbe_volatile=2**63 - 1)])
    assert codec.decode_as(codec.encode(record), TelemetrySample) == record


def test_decode_as_rejects_a_record_without_its_tag() -> None:
    """Regression: a msgspec decoder for one tagged struct treats the tag as optional."""
    obj = raw(TelemetrySample(node="gpu-01", ts=1.0))
    del obj["type"]
    with pytest.raises(CodecError) as info:
        codec.decode_as(json.dumps(obj).encode(), TelemetrySample)
    assert "type" in info.value.reason
