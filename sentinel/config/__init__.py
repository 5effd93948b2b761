"""Typed configuration: one TOML file, defaulted, validated once, errors that name the path.

Defaults give the single-machine embedded setup (memory transport, SQLite, dry-run actuator, observe-only
policy): nothing is ever drained unless a file says ``policy.mode = "act"`` and names a real actuator.

Environment overrides live here and only here: ``SENTINEL__SECTION__KEY=value`` sets ``section.key``
(the value is read as a TOML value when it parses as one, else as a string), e.g.
``SENTINEL__STORE__URL=postgresql+psycopg://...``.
"""

from __future__ import annotations

import copy
import math
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from sentinel.config.actuation import ActuatorConfig, SecurityConfig
from sentinel.config.agent import AgentConfig, CheckConfig, DcgmConfig, KmsgConfig, NicConfig, NvmlConfig
from sentinel.config.alerts import AlertRuleConfig, AlertsConfig
from sentinel.config.detector import DetectorConfig, HazardConfig, StragglerConfig, ThermalRuleConfig
from sentinel.config.fields import Section, non_negative, positive, require
from sentinel.config.transport import TransportConfig
from sentinel.config.urls import url_secrets
from sentinel.errors import ConfigError

ENV_PREFIX = "SENTINEL__"
__all__ = [
    "AgentConfig", "AlertRuleConfig", "AlertsConfig", "CheckConfig", "Config", "DcgmConfig", "DetectorConfig",
    "HazardConfig", "KmsgConfig", "NicConfig", "NvmlConfig", "StragglerConfig", "ThermalRuleConfig",
]


class BreakerConfig(Section, frozen=True):
    max_fraction: float = 0.1
    window_s: float = 3600.0
    min_nodes: int = 1  # nodes that may be acted on per window whatever the fraction (small partitions)
    min_healthy: int = 0  # never leave fewer nodes than this in service (0: off); a refusal does not open it

    def __post_init__(self) -> None:
        require(0 < self.max_fraction <= 1, "max_fraction", "must be in (0, 1]", self.max_fraction)
        positive("window_s", self.window_s)
        require(self.min_nodes >= 1, "min_nodes", "must be >= 1", self.min_nodes)
        require(self.min_healthy >= 0, "min_healthy", "must be >= 0", self.min_healthy)


class HysteresisConfig(Section, frozen=True):
    # findings an incident needs before a predicted (not fatal) failure is acted on; below that it only alerts.
    # The built-in rules already require persistence before they report (thermal: sustain_samples, 3 C band).
    min_findings: int = 1
    quiet_s: float = 3600.0  # an incident not acted on and without a new finding this long is resolved

    def __post_init__(self) -> None:
        require(1 <= self.min_findings <= 1000, "min_findings", "must be in [1, 1000]", self.min_findings)
        positive("quiet_s", self.quiet_s)


class LemonConfig(Section, frozen=True):
    window_s: float = 14 * 86_400.0  # a node with min_incidents incidents opened in this window is a lemon
    min_incidents: int = 2

    def __post_init__(self) -> None:
        positive("window_s", self.window_s)
        require(self.min_incidents >= 1, "min_incidents", "must be >= 1", self.min_incidents)


class CostConfig(Section, frozen=True):
    """Skip a job's checkpoint when it buys nothing (needs a scheduler that reports job timing)."""

    skip_if_checkpointed_within_s: float = 600.0
    skip_if_ends_within_s: float = 600.0

    def __post_init__(self) -> None:
        non_negative("skip_if_checkpointed_within_s", self.skip_if_checkpointed_within_s)
        non_negative("skip_if_ends_within_s", self.skip_if_ends_within_s)


class StragglerPolicyConfig(Section, frozen=True):
    """When removing a confirmed straggler pays: a synchronous job runs at the straggler's speed, so staying costs
    the job ``1 - ratio`` of its time over ``slow_horizon_s``; removing it costs ``restart_s`` of the whole job
    (reschedule, load, warm-up). Job size multiplies both sides, so it cancels."""

    enabled: bool = True  # false: a confirmed straggler only alerts
    restart_s: float = 600.0  # assumption, as bench goodput's restart cost
    slow_horizon_s: float = 3600.0  # how long a fail-slow GPU keeps slowing the job if left (FALCON: 10 s to 10 h)

    def __post_init__(self) -> None:
        non_negative("restart_s", self.restart_s)
        positive("slow_horizon_s", self.slow_horizon_s)


class PolicyConfig(Section, frozen=True):
    mode: Literal["observe", "act"] = "observe"
    cooldown_s: float = 600.0
    opt_out_nodes: list[str] = msgspec.field(default_factory=list)
    command_ttl_s: float = 300.0
    command_resend_s: float = 30.0  # the outbox publishes a command again while no final result came back
    drain_watch_s: float = 60.0  # how often the controller asks the scheduler whether drained nodes came back
    min_confidence: float = 0.5  # a predicted failure below this confidence only alerts
    breaker: BreakerConfig = msgspec.field(default_factory=BreakerConfig)
    hysteresis: HysteresisConfig = msgspec.field(default_factory=HysteresisConfig)
    lemon: LemonConfig = msgspec.field(default_factory=LemonConfig)
    cost: CostConfig = msgspec.field(default_factory=CostConfig)
    straggler: StragglerPolicyConfig = msgspec.field(default_factory=StragglerPolicyConfig)

    def __post_init__(self) -> None:
        non_negative("cooldown_s", self.cooldown_s)
        positive("command_ttl_s", self.command_ttl_s)
        positive("command_resend_s", self.command_resend_s)
        positive("drain_watch_s", self.drain_watch_s)
        require(0 <= self.min_confidence <= 1, "min_confidence", "must be in [0, 1]", self.min_confidence)


class RetentionConfig(Section, frozen=True):
    """How long the store keeps what stops mattering (``sentinel.store.retention``); 0 keeps it forever."""

    resolved_incidents_days: float = 90.0  # with their findings, decisions, commands and action steps
    findings_days: float = 30.0  # findings that opened no incident (information only)
    journal_days: float = 7.0  # the actuator's journal of finished (or long expired) commands
    load_bins_days: float = 400.0  # the forecast learns weekly and yearly seasons from these
    forecasts_days: float = 30.0  # forecasts as they were made
    nodes_days: float = 30.0  # nodes not heard from (and holding no incident): a removed node stops counting
    queue_jobs_days: float = 30.0  # ended jobs of the job table (the job-aware forecast reads the last 8 days)
    interval_s: float = 3600.0  # how often the controller prunes

    def __post_init__(self) -> None:
        for name in ("resolved_incidents_days", "findings_days", "journal_days", "load_bins_days", "forecasts_days",
                     "nodes_days", "queue_jobs_days"):
            non_negative(name, getattr(self, name))
        positive("interval_s", self.interval_s)


class StoreConfig(Section, frozen=True):
    url: str = "sqlite:///sentinel.db"
    retention: RetentionConfig = msgspec.field(default_factory=RetentionConfig)

    def __post_init__(self) -> None:
        require("://" in self.url, "url", "must be a SQLAlchemy URL like sqlite:///path.db", self.url)
        kind = self.url.split("://", 1)[0].split("+", 1)[0]
        require(kind in ("sqlite", "postgresql"), "url",
                "must be sqlite:///PATH or postgresql+psycopg://USER@HOST/DB", self.url.split("@")[-1])


class MetricsConfig(Section, frozen=True):
    listen: str = ""  # "127.0.0.1:9400" serves /metrics; empty serves nothing
    # HTTPS for /metrics (this section serves the services' and, in the agent's config, the agent's endpoint):
    # a certificate and its key; with client_ca_file, only scrapers with a certificate that CA signed get in
    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""
    # or the Prometheus exporter web configuration file (TLS and bcrypt basic auth; sentinel/obs/web.py)
    web_config_file: str = ""

    def __post_init__(self) -> None:
        if self.listen:
            host, _, port = self.listen.rpartition(":")
            require(
                bool(host) and port.isdigit() and 0 < int(port) < 65536, "listen", "must be HOST:PORT", self.listen
            )
        require(bool(self.cert_file) == bool(self.key_file), "cert_file", "and key_file go together",
                self.cert_file or self.key_file)
        require(not self.client_ca_file or bool(self.cert_file), "client_ca_file", "needs cert_file and key_file",
                self.client_ca_file)
        require(not (self.web_config_file and self.cert_file), "web_config_file",
                "replaces cert_file/key_file/client_ca_file: set one or the other", self.web_config_file)


class LoadConfig(Section, frozen=True):
    """Live load bins for ``sentinel forecast`` (issue 8), recorded by ``sentinel controller`` / ``sentinel run``."""

    record: Literal["auto", "squeue", "off"] = "auto"  # auto: squeue when actuator.kind = "slurm", else off
    interval_s: float = 600.0  # how often the queue is read; bins are 10 minutes, so at most 600
    refit: bool = True  # refit and store the demand forecaster once 6 new bins arrived

    def __post_init__(self) -> None:
        require(math.isfinite(self.interval_s) and 1.0 <= self.interval_s <= 600.0, "interval_s",
                "must be between 1 and 600 seconds (one snapshot per 10-minute bin at least)", self.interval_s)


class Config(Section, frozen=True):
    agent: AgentConfig = msgspec.field(default_factory=AgentConfig)
    check: CheckConfig = msgspec.field(default_factory=CheckConfig)
    transport: TransportConfig = msgspec.field(default_factory=TransportConfig)
    detector: DetectorConfig = msgspec.field(default_factory=DetectorConfig)
    policy: PolicyConfig = msgspec.field(default_factory=PolicyConfig)
    alerts: AlertsConfig = msgspec.field(default_factory=AlertsConfig)
    actuator: ActuatorConfig = msgspec.field(default_factory=ActuatorConfig)
    security: SecurityConfig = msgspec.field(default_factory=SecurityConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    metrics: MetricsConfig = msgspec.field(default_factory=MetricsConfig)
    load: LoadConfig = msgspec.field(default_factory=LoadConfig)

    def node_name(self) -> str:
        return self.agent.node or socket.gethostname().split(".")[0]


def from_mapping(raw: Mapping[str, Any]) -> Config:
    """Build a validated Config from a parsed TOML mapping; raise ConfigError naming the path of every problem
    (each one found is set aside and the rest validated again, so one run shows everything to fix)."""
    try:
        return msgspec.convert(raw, Config)
    except msgspec.ValidationError as exc:
        problems = [explain(str(exc))]
    rest = copy.deepcopy(dict(raw)) if isinstance(raw, Mapping) else {}
    while len(problems) < 50 and _set_aside(rest, problems[-1].split(": ", 1)[0]):
        try:
            msgspec.convert(rest, Config)
            break
        except msgspec.ValidationError as exc:
            problems.append(explain(str(exc)))
    if len(problems) == 1:
        raise ConfigError(problems[0])
    raise ConfigError(f"{len(problems)} problems:\n  " + "\n  ".join(problems))


def _set_aside(raw: dict[str, Any], path: str) -> bool:
    """Remove the key a problem names (``policy.breaker.max_fraction``) so the next pass finds the next one;
    False when the path names nothing removable (then the first problems are all there is to say)."""
    *parents, key = path.split(".")
    node: Any = raw
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or key not in node:
        return False
    del node[key]
    return True


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
        _refuse_readable_secrets(Path(path), raw)
    apply_env(raw, os.environ if environ is None else environ)
    _read_secret_files(raw)
    return from_mapping(raw)


SECRET_FILES = (("store", "url"),)  # (section, key): `key_file` names a file holding the key's value


def _refuse_readable_secrets(path: Path, raw: dict[str, Any]) -> None:
    """A config file that holds a secret itself (a password in store.url, a Kafka client password) must not be
    readable by others (issue 19); keep secrets in ``*_file`` files, or make the config 0640."""
    held = []
    url = raw.get("store", {}).get("url") if isinstance(raw.get("store"), dict) else None
    if isinstance(url, str):
        held += [f"store.url's {what}" for what in url_secrets(url)]
    client = raw.get("transport", {}).get("kafka", {}).get("client", {})
    held += [f"transport.kafka.client.{k}" for k in (client if isinstance(client, dict) else {}) if "password" in k]
    mode = path.stat().st_mode & 0o777
    if held and mode & 0o004:
        raise ConfigError(f"{path}: holds a secret ({', '.join(held)}) and others can read it (mode {mode:04o}): "
                          f"run `chmod o-rwx {path}`, or move the secret to a *_file (docs/security.md)")


def _read_secret_files(raw: dict[str, Any]) -> None:
    """``store.url_file`` (and every ``*_file`` key of ``transport.kafka.client``) names a file holding the
    secret, so the CLI and the services read the same config without a password in it. Such a file must not be
    readable by others (group-readable is fine: the operators' group)."""
    kafka_client = raw.get("transport", {}).get("kafka", {}).get("client", {})
    places = [(raw.get(section, {}), key, f"{section}.{key}") for section, key in SECRET_FILES]
    places += [(kafka_client, name.removesuffix("_file"), f"transport.kafka.client.{name.removesuffix('_file')}")
               for name in list(kafka_client) if name.endswith("_file")]
    for table, key, dotted in places:
        path = table.pop(f"{key}_file", None) if isinstance(table, dict) else None
        if path is None:
            continue
        try:
            mode = os.stat(path).st_mode
            text = Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"{dotted}_file: {path}: cannot read: {exc.strerror}") from None
        if mode & 0o007:
            raise ConfigError(f"{dotted}_file: {path} is readable by others (mode {mode & 0o777:04o}); it holds a "
                              f"secret: run `chmod o-rwx {path}`")
        table[key] = text


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


def _choices(path: str) -> list[str]:
    """The values a Literal or enum field at ``path`` (``policy.mode``) accepts; [] when not found."""
    import enum
    import typing

    kind: Any = Config
    for part in path.split("."):
        hints = typing.get_type_hints(kind) if isinstance(kind, type) else {}
        if part not in hints:
            return []
        kind = hints[part]
    if typing.get_origin(kind) is typing.Literal:
        return [str(v) for v in typing.get_args(kind)]
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return [str(m.value) for m in kind]
    return []


def explain(message: str, prefix: str = "") -> str:
    """Turn msgspec's 'msg - at `$.a.b`' into 'a.b: msg' (our checks already start with the field name);
    ``prefix`` is the section a message about one section's own validation came from."""
    match = _PATH_RE.match(message)
    assert match is not None
    msg, path = match.group("msg"), (match.group("path") or "").lstrip(".")
    path = ".".join(p for p in (prefix, path) if p)
    unknown = re.match(r"Object contains unknown field `(?P<key>[^`]+)`", msg)
    if unknown:
        key = ".".join(p for p in (path, unknown.group("key")) if p)
        return f"{key}: unknown key"
    if msg.startswith("Invalid enum value"):
        choices = _choices(path)
        if choices:
            msg += f"; valid: {', '.join(sorted(choices))}"
    field = re.match(r"^(?P<field>[a-z_0-9]+): (?P<rest>.*)$", msg, re.S)
    if field:
        return f"{'.'.join(p for p in (path, field.group('field')) if p)}: {field.group('rest')}"
    return f"{path or '(top level)'}: {msg}"
