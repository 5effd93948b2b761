"""Typed configuration: one TOML file, defaulted, validated once, errors that name the path.

Defaults give the single-machine embedded setup (memory transport, SQLite, dry-run actuator, observe-only
policy): nothing is ever drained unless a file says ``policy.mode = "act"`` and names a real actuator.

Environment overrides live here and only here: ``SENTINEL__SECTION__KEY=value`` sets ``section.key``
(the value is read as a TOML value when it parses as one, else as a string), e.g.
``SENTINEL__STORE__URL=postgresql+psycopg://...``.
"""

from __future__ import annotations

import math
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from sentinel.errors import ConfigError
from sentinel.events import NODE_NAME_PATTERN

ENV_PREFIX = "SENTINEL__"


def require(ok: bool, field: str, message: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{field}: {message}, got {value!r}")


def _positive(field: str, value: float) -> None:
    require(math.isfinite(value) and value > 0, field, "must be a finite number > 0", value)


def _listen(field: str, value: str) -> None:
    if value:
        host, _, port = value.rpartition(":")
        require(bool(host) and port.isdigit() and 0 < int(port) < 65536, field, "must be HOST:PORT", value)


class _Section(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


class DcgmConfig(_Section, frozen=True):
    url: str = "http://127.0.0.1:9400/metrics"
    timeout_s: float = 2.0

    def __post_init__(self) -> None:
        require(self.url.startswith(("http://", "https://")), "url", "must be an http(s) URL", self.url)
        _positive("timeout_s", self.timeout_s)


class NicConfig(_Section, frozen=True):
    sysfs_root: str = "/sys"
    include: list[str] = msgspec.field(default_factory=list)  # glob patterns; empty: every interface and port
    exclude: list[str] = msgspec.field(default_factory=lambda: ["lo"])


class KmsgConfig(_Section, frozen=True):
    path: str = "/dev/kmsg"  # or a syslog file to tail
    state_path: str = "sentinel-kmsg.position"  # read position kept across restarts; "" = start at the end


class NvmlConfig(_Section, frozen=True):
    xid_events: bool = True


class AgentConfig(_Section, frozen=True):
    node: str = ""  # empty: this host's short name
    interval_s: float = 1.0
    collectors: list[str] = msgspec.field(default_factory=lambda: ["host", "nvml", "nic", "kmsg"])
    intervals: dict[str, float] = msgspec.field(default_factory=dict)  # per-collector interval, e.g. host = 10
    spool_path: str = "sentinel-agent-spool.db"
    spool_max_messages: int = 100_000
    metrics_listen: str = ""  # HOST:PORT for the agent's own /metrics
    dcgm: DcgmConfig = msgspec.field(default_factory=DcgmConfig)
    nic: NicConfig = msgspec.field(default_factory=NicConfig)
    kmsg: KmsgConfig = msgspec.field(default_factory=KmsgConfig)
    nvml: NvmlConfig = msgspec.field(default_factory=NvmlConfig)

    def __post_init__(self) -> None:
        _positive("interval_s", self.interval_s)
        if self.node:
            require(re.match(NODE_NAME_PATTERN, self.node) is not None, "node", "not a valid node name", self.node)
        for name, value in self.intervals.items():
            _positive(f"intervals.{name}", value)
        require(self.spool_max_messages >= 1, "spool_max_messages", "must be >= 1", self.spool_max_messages)
        _listen("metrics_listen", self.metrics_listen)


class KafkaConfig(_Section, frozen=True):
    bootstrap: str = "127.0.0.1:9092"
    # partitions per topic when Sentinel creates them; the commands topic always has exactly one partition, so
    # exactly one actuator is active (the group member that holds it)
    partitions: dict[str, int] = msgspec.field(default_factory=lambda: {
        "telemetry": 12, "logs": 12, "findings": 4, "results": 1, "dead-letters": 1})
    compression: Literal["gzip", "none"] = "gzip"
    send_timeout_s: float = 10.0
    session_timeout_ms: int = 10_000  # a dead group member's partitions move after this long
    heartbeat_interval_ms: int = 3_000
    # passed to kafka-python unchanged: security_protocol, ssl_cafile, sasl_mechanism, sasl_plain_username, ...
    client: dict[str, str | int | bool] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        require(bool(self.bootstrap.strip()), "bootstrap", "must name at least one HOST:PORT", self.bootstrap)
        for topic, count in self.partitions.items():
            require(topic in ("telemetry", "logs", "findings", "results", "dead-letters"), f"partitions.{topic}",
                     "not a topic (telemetry, logs, findings, results, dead-letters)", topic)
            require(1 <= count <= 10_000, f"partitions.{topic}", "must be in [1, 10000]", count)
        _positive("send_timeout_s", self.send_timeout_s)


class TransportConfig(_Section, frozen=True):
    kind: str = "memory"
    capacity: int = 100_000  # messages held per topic by the embedded transport before producers are refused
    kafka: KafkaConfig = msgspec.field(default_factory=KafkaConfig)

    def __post_init__(self) -> None:
        require(self.capacity >= 1, "capacity", "must be >= 1", self.capacity)


class ThermalRuleConfig(_Section, frozen=True):
    temp_c: float = 93.0  # Azure healthagent warns above 93 C (domain.md)
    sustain_samples: int = 3

    def __post_init__(self) -> None:
        require(0 < self.temp_c < 150, "temp_c", "must be in (0, 150)", self.temp_c)
        require(self.sustain_samples >= 1, "sustain_samples", "must be >= 1", self.sustain_samples)


class DetectorConfig(_Section, frozen=True):
    window_samples: int = 60
    replay_messages: int = 5000  # per partition handed over from another member (Kafka only)
    record_interval_s: float = 30.0  # how often each node's last-seen and GPU rows are written to the store
    thermal: ThermalRuleConfig = msgspec.field(default_factory=ThermalRuleConfig)

    def __post_init__(self) -> None:
        require(2 <= self.window_samples <= 100_000, "window_samples", "must be in [2, 100000]", self.window_samples)
        require(self.replay_messages >= 0, "replay_messages", "must be >= 0", self.replay_messages)
        require(math.isfinite(self.record_interval_s) and self.record_interval_s >= 0, "record_interval_s",
                 "must be a finite number >= 0", self.record_interval_s)


class BreakerConfig(_Section, frozen=True):
    max_fraction: float = 0.1
    window_s: float = 3600.0

    def __post_init__(self) -> None:
        require(0 < self.max_fraction <= 1, "max_fraction", "must be in (0, 1]", self.max_fraction)
        _positive("window_s", self.window_s)


class PolicyConfig(_Section, frozen=True):
    mode: Literal["observe", "act"] = "observe"
    cooldown_s: float = 600.0
    opt_out_nodes: list[str] = msgspec.field(default_factory=list)
    command_ttl_s: float = 300.0
    breaker: BreakerConfig = msgspec.field(default_factory=BreakerConfig)

    def __post_init__(self) -> None:
        require(math.isfinite(self.cooldown_s) and self.cooldown_s >= 0, "cooldown_s", "must be a finite number >= 0",
                 self.cooldown_s)
        _positive("command_ttl_s", self.command_ttl_s)


class SlurmActuatorConfig(_Section, frozen=True):
    """``actuator.slurm``: how Sentinel drives Slurm (docs/actuation-slurm.md)."""

    bin_dir: str = ""  # folder holding scontrol, squeue, sinfo, scancel; "" = found on PATH
    slurm_conf: str = ""  # SLURM_CONF for those commands; "" = Slurm's own default
    signal: str = "USR1"  # sent to the job to ask for a checkpoint (scancel --signal)
    signal_target: Literal["batch", "full"] = "batch"  # scancel --batch (the batch shell) or --full (all of it)
    ack_dir: str = "/var/lib/sentinel/ack"  # shared with the jobs: request and acknowledgement files
    ack_timeout_s: float = 120.0  # give up waiting for a job's checkpoint after this long (then drain anyway)
    poll_s: float = 0.1  # how often acknowledgements and job states are read while waiting
    command_timeout_s: float = 15.0  # one scontrol/squeue/sinfo/scancel call
    unreachable_timeout_s: float = 300.0  # keep retrying while slurmctld does not answer (default: a command's TTL)
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 10.0
    requeue_start_timeout_s: float = 15.0  # nudge a requeued job (StartTime=now, release) until it may start

    def __post_init__(self) -> None:
        import signal as signals

        require(f"SIG{self.signal.upper()}" in signals.Signals.__members__ and self.signal.isalnum(), "signal",
                "must be a signal name such as USR1, USR2 or TERM", self.signal)
        require(bool(self.ack_dir), "ack_dir", "must name a folder shared with the jobs", self.ack_dir)
        for name in ("ack_timeout_s", "poll_s", "command_timeout_s", "unreachable_timeout_s", "backoff_initial_s",
                     "backoff_max_s", "requeue_start_timeout_s"):
            _positive(name, getattr(self, name))
        require(self.backoff_max_s >= self.backoff_initial_s, "backoff_max_s", "must be >= backoff_initial_s",
                self.backoff_max_s)


class ActuatorConfig(_Section, frozen=True):
    kind: str = "dryrun"
    slurm: SlurmActuatorConfig = msgspec.field(default_factory=SlurmActuatorConfig)


class StoreConfig(_Section, frozen=True):
    url: str = "sqlite:///sentinel.db"

    def __post_init__(self) -> None:
        require("://" in self.url, "url", "must be a SQLAlchemy URL like sqlite:///path.db", self.url)


class MetricsConfig(_Section, frozen=True):
    listen: str = ""  # "127.0.0.1:9400" serves /metrics; empty serves nothing

    def __post_init__(self) -> None:
        if self.listen:
            host, _, port = self.listen.rpartition(":")
            require(
                bool(host) and port.isdigit() and 0 < int(port) < 65536, "listen", "must be HOST:PORT", self.listen
            )


class Config(_Section, frozen=True):
    agent: AgentConfig = msgspec.field(default_factory=AgentConfig)
    transport: TransportConfig = msgspec.field(default_factory=TransportConfig)
    detector: DetectorConfig = msgspec.field(default_factory=DetectorConfig)
    policy: PolicyConfig = msgspec.field(default_factory=PolicyConfig)
    actuator: ActuatorConfig = msgspec.field(default_factory=ActuatorConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    metrics: MetricsConfig = msgspec.field(default_factory=MetricsConfig)

    def node_name(self) -> str:
        return self.agent.node or socket.gethostname().split(".")[0]


def from_mapping(raw: Mapping[str, Any]) -> Config:
    """Build a validated Config from a parsed TOML mapping; raise ConfigError naming the path."""
    try:
        return msgspec.convert(raw, Config)
    except msgspec.ValidationError as exc:
        raise ConfigError(explain(str(exc))) from None


def load(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (or nothing: defaults), apply environment overrides, validate once."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such file") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    apply_env(raw, os.environ if environ is None else environ)
    return from_mapping(raw)


def apply_env(raw: dict[str, Any], environ: Mapping[str, str]) -> None:
    """Overlay ``SENTINEL__A__B=value`` variables onto the raw mapping as ``a.b = value``."""
    for name, text in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        keys = [k.lower() for k in name[len(ENV_PREFIX) :].split("__")]
        if not all(keys):
            raise ConfigError(f"{name}: empty key in environment override")
        node = raw
        for key in keys[:-1]:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{name}: {'.'.join(keys)} is not a table")
            node = child
        node[keys[-1]] = _env_value(text)


def _env_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def to_toml_dict(config: Config) -> dict[str, Any]:
    """The normalised config as plain data (what ``sentinel config check`` prints)."""
    return msgspec.to_builtins(config)  # type: ignore[no-any-return]


_PATH_RE = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)


def explain(message: str) -> str:
    """Turn msgspec's 'msg - at `$.a.b`' into 'a.b: msg' (our checks already start with the field name)."""
    match = _PATH_RE.match(message)
    assert match is not None
    msg, path = match.group("msg"), (match.group("path") or "").lstrip(".")
    unknown = re.match(r"Object contains unknown field `(?P<key>[^`]+)`", msg)
    if unknown:
        key = ".".join(p for p in (path, unknown.group("key")) if p)
        return f"{key}: unknown key"
    field = re.match(r"^(?P<field>[a-z_0-9]+): (?P<rest>.*)$", msg, re.S)
    if field:
        return f"{'.'.join(p for p in (path, field.group('field')) if p)}: {field.group('rest')}"
    return f"{path or '(top level)'}: {msg}"
