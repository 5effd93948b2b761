"""The codec is the gate: every valid record round-trips, and any other input raises ``CodecError`` only."""

from __future__ import annotations

import json
import string
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
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
    GpuState,
    HostReading,
    Incident,
    IncidentStatus,
    LogEvent,
    LogKind,
    Mode,
    NicReading,
    NvLinkReading,
    Recommendation,
    Severity,
    Step,
    StepStatus,
    TelemetrySample,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WIRE_TYPES = (TelemetrySample, LogEvent, Finding, Incident, Decision, Command, ActionResult, DeadLetter)
TAGS = {"telemetry", "log", "finding", "incident", "decision", "command", "result", "dead_letter"}

# ----- strategies for valid records --------------------------------------------------------------------------

NAME_FIRST = string.ascii_letters + string.digits
NAME_REST = NAME_FIRST + "._-"
node_names = st.builds(lambda a, b: a + b, st.sampled_from(NAME_FIRST), st.text(NAME_REST, max_size=62))
job_ids = st.builds(lambda a, b: a + b, st.sampled_from(NAME_FIRST), st.text(NAME_REST + ":/", max_size=20))
record_ids = st.text(min_size=1, max_size=40)
texts = st.text(max_size=40)
timestamps = st.floats(min_value=0.0, max_value=1e11)
finite = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False)
fractions = st.floats(min_value=0.0, max_value=1.0)
counters = st.integers(min_value=0, max_value=2**63 - 1)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
gpu_index = st.integers(min_value=0, max_value=1023)


def opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


nvlink_readings = st.builds(
    NvLinkReading,
    link=st.integers(min_value=0, max_value=63),
    active=opt(st.booleans()),
    crc_errors=opt(counters),
    replay_errors=opt(counters),
    recovery_errors=opt(counters),
)
counter_maps = st.dictionaries(st.text(max_size=20), counters, max_size=3)
gpu_readings = st.builds(
    GpuReading,
    index=gpu_index,
    uuid=st.text(max_size=40),
    pci_bus_id=st.text(max_size=20),
    model=st.text(max_size=20),
    state=st.sampled_from(GpuState),
    temp_c=opt(finite),
    mem_temp_c=opt(finite),
    power_w=opt(finite),
    power_limit_w=opt(finite),
    sm_clock_mhz=opt(finite),
    mem_clock_mhz=opt(finite),
    util_gpu_pct=opt(finite),
    util_mem_pct=opt(finite),
    mem_used_bytes=opt(counters),
    mem_total_bytes=opt(counters),
    throttle_reasons=opt(counters),
    ecc_sbe_volatile=opt(counters),
    ecc_dbe_volatile=opt(counters),
    ecc_sbe_aggregate=opt(counters),
    ecc_dbe_aggregate=opt(counters),
    retired_pages_pending=opt(counters),
    retired_pages_sbe=opt(counters),
    retired_pages_dbe=opt(counters),
    row_remap_correctable=opt(counters),
    row_remap_uncorrectable=opt(counters),
    row_remap_pending=opt(st.booleans()),
    row_remap_failure=opt(st.booleans()),
    pcie_replay=opt(counters),
    fan_pct=opt(finite),
    pstate=opt(st.integers(min_value=0, max_value=32)),
    recovery_action=opt(st.integers(min_value=0, max_value=255)),
    nvlinks=st.lists(nvlink_readings, max_size=2),
    deltas=counter_maps,
)
nic_readings = st.builds(
    NicReading,
    name=st.text(min_size=1, max_size=20),
    link_layer=st.text(max_size=10),
    state=st.text(max_size=10),
    carrier=opt(st.booleans()),
    speed_mbps=opt(st.integers(min_value=0, max_value=2**63 - 1)),
    mtu=opt(st.integers(min_value=0, max_value=2**31)),
    counters=counter_maps,
    deltas=counter_maps,
)
host_readings = st.builds(
    HostReading,
    boot_id=st.text(max_size=36),
    uptime_s=opt(finite),
    load1=opt(finite),
    load5=opt(finite),
    cpu_util_pct=opt(finite),
    mem_total_bytes=opt(counters),
    mem_available_bytes=opt(counters),
    disk_used_pct=opt(finite),
)
samples = st.builds(
    TelemetrySample,
    node=node_names,
    ts=timestamps,
    seq=counters,
    interval_s=opt(finite),
    gpus=st.lists(gpu_readings, max_size=3),
    nics=st.lists(nic_readings, max_size=2),
    host=opt(host_readings),
    collector_errors=st.dictionaries(st.text(max_size=10), texts, max_size=2),
)
log_events = st.builds(
    LogEvent,
    node=node_names,
    ts=timestamps,
    kind=st.sampled_from(LogKind),
    message=texts,
    xid=opt(st.integers(min_value=0, max_value=65535)),
    pci_bus_id=opt(st.text(max_size=20)),
    gpu_index=opt(gpu_index),
    attrs=st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=3),
)
evidence_values = finite | int64 | texts | st.booleans()
findings = st.builds(
    Finding,
    id=record_ids,
    node=node_names,
    ts=timestamps,
    observed_ts=timestamps,
    kind=st.sampled_from(FindingClass),
    rule=st.text(min_size=1, max_size=30),
    severity=st.sampled_from(Severity),
    recommendation=st.sampled_from(Recommendation),
    confidence=fractions,
    summary=texts,
    gpu_index=opt(gpu_index),
    evidence=st.dictionaries(st.text(max_size=10), evidence_values, max_size=4),
)
incidents = st.builds(
    Incident,
    id=record_ids,
    node=node_names,
    opened_ts=timestamps,
    updated_ts=timestamps,
    status=st.sampled_from(IncidentStatus),
    severity=st.sampled_from(Severity),
    kind=st.sampled_from(FindingClass),
    summary=texts,
    finding_ids=st.lists(record_ids, max_size=3),
)
decisions = st.builds(
    Decision,
    id=record_ids,
    incident_id=record_ids,
    node=node_names,
    ts=timestamps,
    action=st.sampled_from(ActionKind),
    mode=st.sampled_from(Mode),
    reason=texts,
    blocked_by=st.lists(st.text(max_size=20), max_size=3),
)
commands = st.builds(
    Command,
    id=record_ids,
    decision_id=record_ids,
    incident_id=record_ids,
    node=node_names,
    action=st.sampled_from(ActionKind),
    ts=timestamps,
    expires_ts=timestamps,
    drain_reason=texts,
)
results = st.builds(
    ActionResult,
    id=record_ids,
    command_id=record_ids,
    incident_id=record_ids,
    node=node_names,
    ts=timestamps,
    step=st.sampled_from(Step),
    status=st.sampled_from(StepStatus),
    detail=texts,
    job_ids=st.lists(job_ids, max_size=3),
)
dead_letters = st.builds(
    DeadLetter,
    ts=timestamps,
    reason=texts,
    source_topic=st.text(max_size=30),
    source_partition=int64,
    source_offset=int64,
    key=opt(st.text(max_size=30)),
    payload=st.binary(max_size=64),
)
records = st.one_of(samples, log_events, findings, incidents, decisions, commands, results, dead_letters)

# ----- strategies for invalid input -------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
# A value no field of any record accepts: scalars want a scalar, lists want objects or strings, dicts want scalars.
wrong_typed = st.sampled_from([{"bogus": [[1]]}, [[[]]]])
SHELL_CHARS = " \t\n;|&$`<>()'\"\\*?!{}[]#~=%,+@^"
bad_node_names = st.one_of(
    st.just(""),
    st.builds(lambda a, b: a + b, st.sampled_from(NAME_FIRST), st.text(NAME_REST, min_size=63, max_size=80)),
    st.builds(lambda b: "." + b, st.text(NAME_REST, max_size=5)),
    st.builds(lambda b: "-" + b, st.text(NAME_REST, max_size=5)),
    # a forbidden character anywhere, including last (`$` once let a trailing newline through)
    st.builds(
        lambda a, c, b: a + c + b,
        st.text(NAME_REST, max_size=5),
        st.sampled_from(SHELL_CHARS),
        st.text(NAME_REST, max_size=5),
    ),
    st.builds(
        lambda a, c, b: a + c + b,
        st.text(NAME_REST, max_size=5),
        st.characters(min_codepoint=0x80),
        st.text(NAME_REST, max_size=5),
    ),
)


def raw(record: msgspec.Struct) -> dict[str, Any]:
    """The record as the plain JSON object it travels as."""
    return json.loads(codec.encode(record))


def required_fields(kind: type[msgspec.Struct]) -> list[str]:
    return [f.encode_name for f in msgspec.structs.fields(kind) if f.required]


def float_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every location in a decoded JSON value that holds a float (all such fields are bounded in the schema)."""
    if isinstance(value, float):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in float_paths(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in float_paths(v, (*path, i))]
    return []


def set_path(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


def decode_outcome(data: Any) -> list[CodecError]:
    """Run both decoders; return the CodecErrors they raised. Any other exception type fails the test."""
    errors = []
    for decode in (codec.decode, lambda d: codec.decode_as(d, TelemetrySample)):
        try:
            record = decode(data)
        except CodecError as exc:
            assert isinstance(exc.reason, str) and exc.reason, "a CodecError must carry a reason"
            errors.append(exc)
        else:
            assert isinstance(record, WIRE_TYPES)
    return errors


def assert_rejected(data: bytes) -> list[CodecError]:
    errors = decode_outcome(data)
    assert len(errors) == 2, f"accepted invalid input {data!r}"
    return errors


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
    decode_outcome(data)


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
