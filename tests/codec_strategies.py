"""Hypothesis strategies for every wire record, and the checks the codec tests share."""

from __future__ import annotations

import json
import string
from typing import Any

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from sentinel import codec
from sentinel.errors import CodecError
from sentinel.events import (
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
    SignedCommand,
    Step,
    StepStatus,
    TelemetrySample,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WIRE_TYPES = (TelemetrySample, LogEvent, Finding, Incident, Decision, Command, SignedCommand, ActionResult,
              DeadLetter)
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
    jobs=st.lists(st.text(min_size=1, max_size=12), max_size=3),
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
signed_commands = st.builds(
    SignedCommand,
    key_id=st.text("0123456789abcdef", min_size=16, max_size=16),
    nonce=st.text("0123456789abcdef", min_size=32, max_size=32),
    expires_ts=timestamps,
    payload=st.binary(max_size=256),
    signature=st.text("0123456789abcdef", min_size=64, max_size=64),
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
records = st.one_of(samples, log_events, findings, incidents, decisions, commands, signed_commands, results,
                    dead_letters)

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
