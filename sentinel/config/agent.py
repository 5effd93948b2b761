"""Node-side configuration sections: the agent and its collectors, and what ``sentinel check`` expects."""

from __future__ import annotations

import re

import msgspec

from sentinel.config.fields import Section, listen, positive, require
from sentinel.events import NODE_NAME_PATTERN


class DcgmConfig(Section, frozen=True):
    url: str = "http://127.0.0.1:9400/metrics"
    timeout_s: float = 2.0

    def __post_init__(self) -> None:
        require(self.url.startswith(("http://", "https://")), "url", "must be an http(s) URL", self.url)
        positive("timeout_s", self.timeout_s)


class NicConfig(Section, frozen=True):
    sysfs_root: str = "/sys"
    include: list[str] = msgspec.field(default_factory=list)  # glob patterns; empty: every interface and port
    exclude: list[str] = msgspec.field(default_factory=lambda: ["lo"])


class KmsgConfig(Section, frozen=True):
    path: str = "/dev/kmsg"  # or a syslog file to tail
    state_path: str = "sentinel-kmsg.position"  # read position kept across restarts; "" = start at the end


class NvmlConfig(Section, frozen=True):
    xid_events: bool = True


class AgentConfig(Section, frozen=True):
    node: str = ""  # empty: this host's short name
    interval_s: float = 1.0
    collectors: list[str] = msgspec.field(default_factory=lambda: ["host", "nvml", "nic", "kmsg"])
    intervals: dict[str, float] = msgspec.field(default_factory=dict)  # per-collector interval, e.g. host = 10
    spool_path: str = "sentinel-agent-spool.db"
    spool_max_messages: int = 100_000
    metrics_listen: str = ""  # HOST:PORT for the agent's own /metrics
    node_key_file: str = ""  # this node's telemetry key (`sentinel keygen --node`): signs every message it sends
    dcgm: DcgmConfig = msgspec.field(default_factory=DcgmConfig)
    nic: NicConfig = msgspec.field(default_factory=NicConfig)
    kmsg: KmsgConfig = msgspec.field(default_factory=KmsgConfig)
    nvml: NvmlConfig = msgspec.field(default_factory=NvmlConfig)

    def __post_init__(self) -> None:
        positive("interval_s", self.interval_s)
        if self.node:
            require(re.match(NODE_NAME_PATTERN, self.node) is not None, "node", "not a valid node name", self.node)
        for name, value in self.intervals.items():
            positive(f"intervals.{name}", value)
        require(self.spool_max_messages >= 1, "spool_max_messages", "must be >= 1", self.spool_max_messages)
        listen("metrics_listen", self.metrics_listen)


class CheckConfig(Section, frozen=True):
    """``sentinel check`` (Slurm HealthCheckProgram / NHC): what this node should have; 0 = not checked."""

    expected_gpus: int = 0
    expected_ib_ports: int = 0  # InfiniBand ports that must be ACTIVE
    # Opt-in: when the checks pass on a node Sentinel drained and the node booted after that drain (it was
    # repaired or rebooted), `sentinel check` resumes it through actuator.kind; never a lemon's drain, never
    # someone else's (docs/operations.md "Node health check")
    resume_own_drains: bool = False

    def __post_init__(self) -> None:
        require(0 <= self.expected_gpus <= 64, "expected_gpus", "must be in [0, 64]", self.expected_gpus)
        require(0 <= self.expected_ib_ports <= 64, "expected_ib_ports", "must be in [0, 64]", self.expected_ib_ports)
