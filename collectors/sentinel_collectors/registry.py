"""Collectors by name (``agent.collectors`` in the config): each factory returns the agent slots it fills."""

from __future__ import annotations

from collections.abc import Callable

from sentinel.clock import Clock
from sentinel.config import Config
from sentinel_collectors.agent import Slot, SlotKind
from sentinel_collectors.dcgm import DcgmCollector
from sentinel_collectors.host import HostCollector
from sentinel_collectors.kmsg_source import KmsgSource
from sentinel_collectors.nic import NicCollector
from sentinel_collectors.nvml import NvmlCollector
from sentinel_collectors.slurm_jobs import DEFAULT_INTERVAL_S, SlurmJobs

Factory = Callable[[Config, str, Clock], list[Slot]]


def _slot(config: Config, name: str, kind: SlotKind, read: Callable[[], object]) -> Slot:
    return Slot(name, kind, read, config.agent.intervals.get(name, config.agent.interval_s))


def _nvml(config: Config, node: str, clock: Clock) -> list[Slot]:
    collector = NvmlCollector(node=node, xid_events=config.agent.nvml.xid_events)
    if not collector.enabled:
        return []  # no driver or no GPU: said once in the log, nothing to poll
    return [_slot(config, "nvml", "gpus", collector.read),
            _slot(config, "nvml-events", "logs", lambda: collector.read_events(clock.now()))]


def _nic(config: Config, node: str, clock: Clock) -> list[Slot]:
    nic = config.agent.nic
    collector = NicCollector(nic.sysfs_root, nic.include or None, nic.exclude)
    return [_slot(config, "nic", "nics", collector.read)]


def _slurm_jobs(config: Config, node: str, clock: Clock) -> list[Slot]:
    return [Slot("slurm-jobs", "jobs", SlurmJobs(node).read, config.agent.intervals.get("slurm-jobs",
                                                                                     DEFAULT_INTERVAL_S))]


COLLECTORS: dict[str, Factory] = {
    "host": lambda config, node, clock: [_slot(config, "host", "host", HostCollector(disk_path=".").read)],
    "nvml": _nvml,
    "dcgm": lambda config, node, clock: [_slot(config, "dcgm", "gpus", DcgmCollector(
        config.agent.dcgm.url, config.agent.dcgm.timeout_s).read)],
    "nic": _nic,
    "slurm-jobs": _slurm_jobs,
    "kmsg": lambda config, node, clock: [_slot(config, "kmsg", "logs", KmsgSource(
        config.agent.kmsg.path, node=node, clock=clock, state_path=config.agent.kmsg.state_path or None).read)],
}
