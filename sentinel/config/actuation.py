"""Configuration of the actuators (Slurm, Kubernetes) and of command signing between controller and actuator.

Part of ``sentinel.config`` (which re-exports every class here); split out to keep each module one area.
"""

from __future__ import annotations

import math
import re
from typing import Literal

import msgspec

from sentinel.config.fields import Section, positive, require


class KubernetesConfig(Section, frozen=True):
    """``actuator.kind = "kubernetes"`` (docs/actuation-kubernetes.md)."""

    kubeconfig: str = ""  # empty: $KUBECONFIG, else ~/.kube/config
    context: str = ""  # empty: the kubeconfig's current context
    in_cluster: bool = False  # use the pod's service account instead of a kubeconfig
    request_timeout_s: float = 10.0
    taint_key: str = "sentinel.dev/failing"
    checkpoint_timeout_s: float = 120.0  # how long to wait for a pod's checkpoint acknowledgement
    checkpoint_poll_s: float = 2.0
    eviction_retries: int = 5  # retries while a PodDisruptionBudget blocks an eviction (HTTP 429)
    eviction_backoff_s: float = 2.0  # first wait between retries; doubles, at most 60 s

    def __post_init__(self) -> None:
        for name in ("request_timeout_s", "checkpoint_poll_s"):
            positive(name, getattr(self, name))
        for name in ("checkpoint_timeout_s", "eviction_backoff_s"):
            value = getattr(self, name)
            require(math.isfinite(value) and value >= 0, name, "must be a finite number >= 0", value)
        require(0 <= self.eviction_retries <= 100, "eviction_retries", "must be in [0, 100]", self.eviction_retries)
        require(re.match(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?\Z", self.taint_key)
                is not None, "taint_key", "must be a Kubernetes label key like sentinel.dev/failing", self.taint_key)


class SlurmActuatorConfig(Section, frozen=True):
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
            positive(name, getattr(self, name))
        require(self.backoff_max_s >= self.backoff_initial_s, "backoff_max_s", "must be >= backoff_initial_s",
                self.backoff_max_s)


class ActuatorConfig(Section, frozen=True):
    kind: str = "dryrun"
    # Commands carried out at once by the actuator service, each on its own thread (one per node at a time), so a
    # long checkpoint wait or a slurmctld outage never holds up other nodes' commands nor the service's loop.
    workers: int = 8
    # A command the actuator started but could not finish (each resume failed: the scheduler keeps refusing) is
    # abandoned this long after its expiry, with that reason in its verify step, instead of retried for ever.
    give_up_after_s: float = 3600.0

    def __post_init__(self) -> None:
        require(1 <= self.workers <= 256, "workers", "must be in [1, 256]", self.workers)
        require(self.give_up_after_s > 0, "give_up_after_s", "must be > 0", self.give_up_after_s)
    kubernetes: KubernetesConfig = msgspec.field(default_factory=KubernetesConfig)
    slurm: SlurmActuatorConfig = msgspec.field(default_factory=SlurmActuatorConfig)


class SecurityConfig(Section, frozen=True):
    """Command signing between the controller and the actuator (docs/security.md).

    ``key_file`` holds the HMAC-SHA256 key (mode 0600). The separate services (`sentinel controller`) refuse to
    start without it; ``sentinel run`` and ``sentinel demo`` use a random per-process key when it is empty.
    """

    key_file: str = ""
    previous_key_files: list[str] = msgspec.field(default_factory=list)  # still accepted during a key rotation
    max_command_ttl_s: float = 3600.0  # commands expiring further ahead are refused; bounds the nonce records
    # Per-node telemetry identity: the detector derives each node's key from this one and refuses telemetry and
    # log messages not signed by the node they name (agents hold agent.node_key_file; docs/security.md).
    fleet_key_file: str = ""
    previous_fleet_key_files: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        positive("max_command_ttl_s", self.max_command_ttl_s)
        require(not self.previous_key_files or bool(self.key_file), "previous_key_files",
                "needs key_file (the current key) as well", self.previous_key_files)
        require(not self.previous_fleet_key_files or bool(self.fleet_key_file), "previous_fleet_key_files",
                "needs fleet_key_file (the current key) as well", self.previous_fleet_key_files)
