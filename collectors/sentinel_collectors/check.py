"""``sentinel check``: is this node fit to run jobs right now? For Slurm's ``HealthCheckProgram`` and NHC.

Reads the node once (NVML, InfiniBand ports in sysfs) and judges the readings (``judge``, a pure function): the
NVIDIA driver answers, the GPU count is the expected one, no GPU fell off the bus, no uncorrectable memory error
is waiting for a reset (volatile double-bit errors, pending or failed row remaps, pages pending retirement), NVML
asks for no recovery action, and the expected InfiniBand ports are ACTIVE. Expected counts come from
``[check]`` in the config (0: not checked) or the command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sentinel.events import GpuReading, GpuState, NicReading

RECOVERY = {1: "a GPU reset", 2: "a node reboot", 3: "a drain and reset (Dynamic Page Offlining)", 4: "a drain"}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: not checked
    detail: str


def judge(gpus: list[GpuReading], driver_error: str, nics: list[NicReading] | None, expected_gpus: int,
          expected_ib_ports: int) -> list[Check]:
    """The checks of one reading of the node, in the order an operator reads them."""
    if driver_error:
        checks = [Check("nvidia driver", False, f"no NVIDIA driver: {driver_error}")]
    else:
        checks = [Check("nvidia driver", True, f"NVML answers, {len(gpus)} GPU(s)")]
        checks.append(Check("gpu count", None, "not checked (check.expected_gpus = 0)") if not expected_gpus else
                      Check("gpu count", len(gpus) == expected_gpus, f"{len(gpus)} of {expected_gpus} expected"))
        lost = [g.index for g in gpus if g.state is GpuState.LOST]
        checks.append(Check("gpus on the bus", not lost, f"lost: GPU {', '.join(map(str, lost))}" if lost else
                            "every GPU answers"))
        memory = [f"GPU {g.index}: {why}" for g in gpus for why in _memory(g)]
        checks.append(Check("gpu memory", not memory, "; ".join(memory) or "no uncorrectable error pending"))
        recovery = [f"GPU {g.index} needs {RECOVERY.get(int(g.recovery_action), 'recovery')}" for g in gpus
                    if g.recovery_action not in (None, 0)]
        checks.append(Check("recovery action", not recovery, "; ".join(recovery) or "none requested by NVML"))
    if nics is None or not expected_ib_ports:
        checks.append(Check("infiniband ports", None, "not checked (check.expected_ib_ports = 0)"))
    else:
        ib = [n for n in nics if "/" in n.name and n.link_layer == "infiniband"]  # HCA ports, not IPoIB netdevs
        active = [n.name for n in ib if "ACTIVE" in n.state.upper()]
        down = sorted(n.name for n in ib if n.name not in active)
        checks.append(Check("infiniband ports", len(active) >= expected_ib_ports,
                            f"{len(active)} of {expected_ib_ports} expected ACTIVE"
                            + (f"; not active: {', '.join(down)}" if down else "")))
    return checks


def _memory(g: GpuReading) -> list[str]:
    out = []
    if g.ecc_dbe_volatile:
        out.append(f"{g.ecc_dbe_volatile} uncorrectable ECC error(s) since the driver loaded")
    if g.row_remap_failure:
        out.append("a row remap failed (the GPU needs replacing)")
    if g.row_remap_pending:
        out.append("a row remap is pending (reset the GPU)")
    if g.retired_pages_pending:
        out.append("pages are pending retirement (reset the GPU)")
    return out


def read_node(nvml: Any, sysfs_root: str, read_nics: bool) -> tuple[list[GpuReading], str, list[NicReading] | None]:
    """One reading of the node: GPUs (or why NVML did not answer) and, when asked, its network ports."""
    from sentinel_collectors.nic import NicCollector
    from sentinel_collectors.nvml import NvmlCollector

    collector = NvmlCollector(nvml, xid_events=False)
    try:
        gpus = collector.read()
        reason = "" if collector.enabled else collector.disabled_reason.split(": no NVIDIA driver")[0].split(
            "; nvml collector disabled")[0]
    finally:
        collector.close()
    nics = NicCollector(sysfs_root).read() if read_nics else None
    return gpus, reason, nics


def boot_ts(proc_stat: str = "/proc/stat") -> float | None:
    """When this host booted (epoch seconds, the kernel's ``btime``), None when it cannot be read."""
    try:
        with open(proc_stat, encoding="ascii") as handle:
            for line in handle:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
