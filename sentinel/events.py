"""The one typed, versioned vocabulary that travels on every arrow of the pipeline.

Every record is a frozen ``msgspec.Struct`` tagged with its ``type`` on the wire and carrying the schema
version ``v``. Units live in field names (``temp_c``, ``power_w``, ``ts`` is seconds since the epoch).
A reading that could not be taken is ``None``, never NaN: non-finite numbers are rejected by the constraints
below, so a NaN from a broken sensor cannot reach a rule or a model.

This module imports no I/O library; the wire encoding lives in ``sentinel.codec``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import msgspec

SCHEMA_VERSION = 1

# Constraints are checked in C by msgspec on decode. NaN fails every comparison, so a bounded float rejects it.
Finite = Annotated[float, msgspec.Meta(ge=-1e300, le=1e300)]
Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Timestamp = Annotated[float, msgspec.Meta(ge=0.0, le=1e11)]
# Device counters are unsigned 64-bit; values past int64 never occur in practice and would overflow numpy
# windows and SQL BIGINT, so the codec caps them there.
CounterValue = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
# Node and job names end up in scheduler commands (argv only, never a shell) and in SQL: keep them boring.
# \Z, not $: `$` also matches before a trailing newline.
NODE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z"
NodeName = Annotated[str, msgspec.Meta(pattern=NODE_NAME_PATTERN)]
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}\Z"
JobId = Annotated[str, msgspec.Meta(pattern=JOB_ID_PATTERN)]
PcieValue = Annotated[int, msgspec.Meta(ge=0, le=64)]  # a PCIe link generation (1-7) or width (lanes, 1-32)
RecordId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Text = Annotated[str, msgspec.Meta(max_length=4096)]
EvidenceValue = Finite | int | str | bool

# Ceilings on the size of every list and dict a record carries (issue 38): decoding refuses anything larger, so
# one message can never grow a detector window without bound. ``detector.limits`` holds a site's tighter caps.
MAX_GPUS = 64  # per node (HGX and DGX nodes carry 8, the largest 16)
MAX_NVLINKS = 64  # per GPU (NVML_NVLINK_MAX_LINKS is 18)
MAX_NICS = 256  # per node, Ethernet interfaces and InfiniBand ports together
MAX_COUNTERS = 512  # per GPU or NIC: counters and deltas
MAX_ENTRIES = 128  # evidence, collector errors, log attributes
Key = Annotated[str, msgspec.Meta(max_length=128)]


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"  # a failure is coming: act before it lands
    FATAL = "fatal"  # the hardware has already failed


SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2, Severity.FATAL: 3}


class GpuState(StrEnum):
    OK = "ok"
    LOST = "lost"  # was present, now does not answer (NVML_ERROR_GPU_IS_LOST, fallen off the bus)


class LogKind(StrEnum):
    XID = "xid"
    GSP = "gsp"
    PCIE_AER = "pcie_aer"
    NIC = "nic"
    SXID = "sxid"  # an NVSwitch error (nvidia-nvswitchN: SXid ...): the GPU fabric of the node
    MCE = "mce"
    OTHER = "other"


class FindingClass(StrEnum):
    GPU_XID = "gpu_xid"
    GPU_ECC = "gpu_ecc"
    GPU_LOST = "gpu_lost"
    GPU_THERMAL = "gpu_thermal"
    GPU_PCIE = "gpu_pcie"  # PCIe link errors (replays)
    GPU_NVLINK = "gpu_nvlink"  # NVLink errors (CRC)
    NIC_INFINIBAND = "nic_infiniband"
    PREDICTED_FAILURE = "predicted_failure"  # the hazard model
    STRAGGLER = "straggler"  # a GPU that holds its job back
    ANOMALY = "anomaly"  # unlike anything healthy the model was trained on; no rule names it


class Recommendation(StrEnum):
    """What the evidence alone suggests; the policy decides what is actually done."""

    NONE = "none"
    ALERT = "alert"
    CHECKPOINT_DRAIN = "checkpoint_drain"  # predicted failure: save the job first, then move it
    DRAIN = "drain"  # failure already happened: the job cannot checkpoint, move it now


class ActionKind(StrEnum):
    NONE = "none"
    ALERT = "alert"
    CHECKPOINT_DRAIN_REQUEUE = "checkpoint_drain_requeue"
    DRAIN_REQUEUE = "drain_requeue"
    # Operator queue: recorded for a person to carry out, never executed by Sentinel.
    REQUEST_GPU_RESET = "request_gpu_reset"
    REQUEST_REBOOT = "request_reboot"


class Mode(StrEnum):
    EXECUTE = "execute"
    OBSERVE = "observe"


class IncidentStatus(StrEnum):
    OPEN = "open"
    MITIGATED = "mitigated"  # acted on: node drained, jobs moved
    RESOLVED = "resolved"


class Step(StrEnum):
    CHECKPOINT = "checkpoint"
    DRAIN = "drain"
    REQUEUE = "requeue"
    VERIFY = "verify"


class StepStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"
    DRY_RUN = "dry_run"


class Record(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", kw_only=True):
    """Base of every wire record: the tag (``type``) and the schema version (``v``)."""

    v: int = SCHEMA_VERSION


class NvLinkReading(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One NVLink of one GPU; error counters are raw and monotonic (they reset with the driver)."""

    link: Annotated[int, msgspec.Meta(ge=0, le=63)]
    active: bool | None = None
    crc_errors: CounterValue | None = None  # CRC flit errors
    crc_data_errors: CounterValue | None = None  # CRC data errors
    replay_errors: CounterValue | None = None  # a flit resent after a CRC error on the link
    recovery_errors: CounterValue | None = None  # the link retrained (DCGM's health watch fails the GPU on either)


class GpuReading(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One GPU at one instant. Counters are raw, monotonic device values (they reset on reboot/driver reload);
    ``deltas`` holds their increase since the previous read, keyed by field name, and omits a counter whose
    previous value is unknown or that went backwards (a reset), so no delta is ever negative."""

    index: Annotated[int, msgspec.Meta(ge=0, le=1023)]
    uuid: Annotated[str, msgspec.Meta(max_length=128)] = ""
    pci_bus_id: Annotated[str, msgspec.Meta(max_length=64)] = ""
    model: Annotated[str, msgspec.Meta(max_length=128)] = ""
    state: GpuState = GpuState.OK
    temp_c: Finite | None = None
    mem_temp_c: Finite | None = None
    power_w: Finite | None = None
    power_limit_w: Finite | None = None
    sm_clock_mhz: Finite | None = None
    mem_clock_mhz: Finite | None = None
    util_gpu_pct: Finite | None = None
    util_mem_pct: Finite | None = None
    mem_used_bytes: CounterValue | None = None
    mem_total_bytes: CounterValue | None = None
    throttle_reasons: CounterValue | None = None  # NVML clock-event reasons bitmask
    ecc_sbe_volatile: CounterValue | None = None
    ecc_dbe_volatile: CounterValue | None = None
    ecc_sbe_aggregate: CounterValue | None = None
    ecc_dbe_aggregate: CounterValue | None = None
    retired_pages_pending: CounterValue | None = None
    retired_pages_sbe: CounterValue | None = None
    retired_pages_dbe: CounterValue | None = None
    row_remap_correctable: CounterValue | None = None
    row_remap_uncorrectable: CounterValue | None = None
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    pcie_replay: CounterValue | None = None
    # The PCIe link as trained now and at most: a link below its maximum width is degraded (downtrained). The
    # generation drops at idle by design (link power management), so only the width is judged.
    pcie_link_gen: PcieValue | None = None
    pcie_link_gen_max: PcieValue | None = None
    pcie_link_width: PcieValue | None = None
    pcie_link_width_max: PcieValue | None = None
    fan_pct: Finite | None = None
    pstate: Annotated[int, msgspec.Meta(ge=0, le=32)] | None = None
    recovery_action: Annotated[int, msgspec.Meta(ge=0, le=255)] | None = None  # DCGM: 0 none, 2 node reboot
    nvlinks: Annotated[list[NvLinkReading], msgspec.Meta(max_length=MAX_NVLINKS)] = msgspec.field(
        default_factory=list)
    deltas: Annotated[dict[Key, CounterValue], msgspec.Meta(max_length=MAX_COUNTERS)] = msgspec.field(
        default_factory=dict)


class NicReading(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One Ethernet interface or InfiniBand port; ``counters`` keeps sysfs counter names verbatim."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    link_layer: Annotated[str, msgspec.Meta(max_length=32)] = "ethernet"
    state: Annotated[str, msgspec.Meta(max_length=32)] = ""
    carrier: bool | None = None
    speed_mbps: Annotated[int, msgspec.Meta(ge=0)] | None = None
    mtu: Annotated[int, msgspec.Meta(ge=0)] | None = None
    counters: Annotated[dict[Key, CounterValue], msgspec.Meta(max_length=MAX_COUNTERS)] = msgspec.field(
        default_factory=dict)
    deltas: Annotated[dict[Key, CounterValue], msgspec.Meta(max_length=MAX_COUNTERS)] = msgspec.field(
        default_factory=dict)  # since the previous read; see GpuReading


class HostReading(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    boot_id: Annotated[str, msgspec.Meta(max_length=64)] = ""
    uptime_s: Finite | None = None
    load1: Finite | None = None
    load5: Finite | None = None
    cpu_util_pct: Finite | None = None
    mem_total_bytes: CounterValue | None = None
    mem_available_bytes: CounterValue | None = None
    disk_used_pct: Finite | None = None  # of the filesystem holding the agent's state directory


class TelemetrySample(Record, tag="telemetry", frozen=True):
    """Everything one node's agent read in one interval."""

    node: NodeName
    ts: Timestamp
    seq: CounterValue = 0
    interval_s: Finite | None = None
    gpus: Annotated[list[GpuReading], msgspec.Meta(max_length=MAX_GPUS)] = msgspec.field(default_factory=list)
    nics: Annotated[list[NicReading], msgspec.Meta(max_length=MAX_NICS)] = msgspec.field(default_factory=list)
    host: HostReading | None = None
    collector_errors: Annotated[dict[Key, Text], msgspec.Meta(max_length=MAX_ENTRIES)] = msgspec.field(
        default_factory=dict)
    # Scheduler jobs running on the node (Slurm job ids, pod owners): nodes that share a job are peers.
    jobs: Annotated[list[Annotated[str, msgspec.Meta(min_length=1, max_length=128)]], msgspec.Meta(max_length=64)] = (
        msgspec.field(default_factory=list))


class LogEvent(Record, tag="log", frozen=True):
    """One kernel-log line that a collector recognised (an Xid, an AER report, an mlx5 error, ...)."""

    node: NodeName
    ts: Timestamp
    kind: LogKind
    message: Text
    xid: Annotated[int, msgspec.Meta(ge=0, le=65535)] | None = None
    pci_bus_id: Annotated[str, msgspec.Meta(max_length=64)] | None = None  # as written in the log
    gpu_index: Annotated[int, msgspec.Meta(ge=0, le=1023)] | None = None
    attrs: Annotated[dict[Annotated[str, msgspec.Meta(max_length=64)], Annotated[str, msgspec.Meta(max_length=512)]],
                     msgspec.Meta(max_length=MAX_ENTRIES)] = (
        msgspec.field(default_factory=dict)
    )  # parser extras: pid, process, severity, device, link, ...


class Finding(Record, tag="finding", frozen=True):
    """A judgement about one node (or one GPU on it), with the evidence behind it."""

    id: RecordId
    node: NodeName
    ts: Timestamp  # when the detector concluded
    observed_ts: Timestamp  # when the evidence was observed on the node
    kind: FindingClass
    rule: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    severity: Severity
    recommendation: Recommendation
    confidence: Fraction
    summary: Text
    gpu_index: Annotated[int, msgspec.Meta(ge=0, le=1023)] | None = None
    evidence: Annotated[dict[Key, EvidenceValue], msgspec.Meta(max_length=MAX_ENTRIES)] = msgspec.field(
        default_factory=dict)


class Incident(Record, tag="incident", frozen=True):
    """Findings about one node grouped into one problem an operator tracks."""

    id: RecordId
    node: NodeName
    opened_ts: Timestamp
    updated_ts: Timestamp
    status: IncidentStatus
    severity: Severity
    kind: FindingClass
    summary: Text
    finding_ids: list[RecordId] = msgspec.field(default_factory=list)
    # Set when the incident was graded into an operator-facing alert (sentinel.alerts.grading); None: evidence only.
    alert_ts: Timestamp | None = None
    alert_reason: Text = ""
    alert_held: bool = False  # graded while the node flaps: shown, not sent again


class Decision(Record, tag="decision", frozen=True):
    """What the policy chose for an incident, and whether it is carried out (EXECUTE) or only recorded."""

    id: RecordId
    incident_id: RecordId
    node: NodeName
    ts: Timestamp
    action: ActionKind
    mode: Mode
    reason: Text
    blocked_by: list[Annotated[str, msgspec.Meta(max_length=64)]] = msgspec.field(default_factory=list)


class Command(Record, tag="command", frozen=True):
    """An order to the actuator; ``drain_reason`` is the text written on the node (owned prefix)."""

    id: RecordId
    decision_id: RecordId
    incident_id: RecordId
    node: NodeName
    action: ActionKind
    ts: Timestamp
    expires_ts: Timestamp
    drain_reason: Text


class SignedCommand(Record, tag="signed_command", frozen=True):
    """A Command as it travels from the controller to the actuator: its exact encoding, sealed.

    ``signature`` is HMAC-SHA256 over the key id, nonce, expiry and ``payload`` (see
    ``sentinel.actuator.signing``); the Command type itself stays unchanged inside ``payload``.
    """

    key_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{16}\Z")]
    nonce: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{32}\Z")]
    expires_ts: Timestamp
    payload: Annotated[bytes, msgspec.Meta(max_length=65536)]  # the codec encoding of one Command
    signature: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}\Z")]


class SealedRecord(Record, tag="sealed", frozen=True):
    """A finding or an action result as it travels between services: its exact encoding, sealed by the service
    that produced it (``sentinel.actuator.sealed``): ``signature`` is HMAC-SHA256 over the record kind, the key id and
    ``payload``, with a key derived from the service key for that kind alone."""

    key_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{16}\Z")]
    payload: Annotated[bytes, msgspec.Meta(max_length=1 << 20)]  # the codec encoding of one record
    signature: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}\Z")]


class ActionResult(Record, tag="result", frozen=True):
    """One step of a command as the scheduler carried it out (or would have, in dry-run)."""

    id: RecordId
    command_id: RecordId
    incident_id: RecordId
    node: NodeName
    ts: Timestamp
    step: Step
    status: StepStatus
    detail: Text = ""
    job_ids: list[JobId] = msgspec.field(default_factory=list)


class DeadLetter(Record, tag="dead_letter", frozen=True):
    """A message no service could use, kept whole with the reason and where it came from."""

    ts: Timestamp
    reason: Text
    source_topic: Annotated[str, msgspec.Meta(max_length=249)]
    source_partition: int = 0
    source_offset: int = -1
    key: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    payload: bytes = b""


WireRecord = (
    TelemetrySample | LogEvent | Finding | Incident | Decision | Command | SignedCommand | SealedRecord | ActionResult
    | DeadLetter
)
