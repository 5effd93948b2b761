"""``sentinel-bench agent``: what one sampling cycle of the node agent costs in CPU time.

One cycle = 8 GPUs through the NVML collector (on the fake NVML library: no GPU here, so this measures our
code, not the driver's ioctls), every real NIC in this machine's /sys, the kernel-log tail of a file that
grows by a few Xid lines per cycle, the host collector, encoding, and the append to the on-disk spool.
The result is CPU seconds per cycle and the share of one core at a 1 Hz interval (goal: at most 0.3 %),
with each collector's share beside it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sentinel.clock import SystemClock
from sentinel.obs.metrics import Metrics
from sentinel.tables import render
from sentinel.testing import FakeNvml, healthy_fields
from sentinel_collectors.agent import Agent, Slot
from sentinel_collectors.host import HostCollector
from sentinel_collectors.kmsg_source import KmsgSource
from sentinel_collectors.nic import NicCollector
from sentinel_collectors.nvml import NvmlCollector
from sentinel_collectors.spool import Spool

GOAL_PCT_AT_1HZ = 0.3
XID_LINE = "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid=1797828, name=python, Graphics Exception"


def _cpu(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Wrap ``fn`` so the CPU time it uses is added to ``wrapped.cpu_s``."""

    def wrapped() -> Any:
        started = time.process_time()
        try:
            return fn()
        finally:
            wrapped.cpu_s += time.process_time() - started  # type: ignore[attr-defined]

    wrapped.cpu_s = 0.0  # type: ignore[attr-defined]
    return wrapped


def run_agent_bench(cycles: int = 300, log_lines_per_cycle: int = 2) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        log_file = Path(tmp) / "kern.log"
        log_file.write_text("")
        fake = FakeNvml(8)
        for gpu in fake.gpus:
            gpu.fields = healthy_fields()
        clock = SystemClock()
        nvml = NvmlCollector(fake, node="bench-node")
        reads = {
            "nvml (8 fake GPUs)": _cpu(nvml.read),
            "nvml events": _cpu(lambda: nvml.read_events(clock.now())),
            "nic (this host's /sys)": _cpu(NicCollector().read),
            "kmsg (file tail)": _cpu(KmsgSource(str(log_file), node="bench-node", clock=clock).read),
            "host (/proc)": _cpu(HostCollector().read),
        }
        kinds = {"nvml (8 fake GPUs)": "gpus", "nvml events": "logs", "nic (this host's /sys)": "nics",
                 "kmsg (file tail)": "logs", "host (/proc)": "host"}
        slots = [Slot(name, kinds[name], read, 0.0) for name, read in reads.items()]  # type: ignore[arg-type]
        spool = Spool(Path(tmp) / "spool.db", max_messages=10 * cycles)
        sink = _cpu(lambda: None)
        pending: list[Any] = []

        def spool_sink(items: list[Any]) -> None:
            pending[:] = items
            sink_fn()

        sink_fn = _cpu(lambda: spool.append(pending))
        agent = Agent("bench-node", slots, spool_sink, Metrics(), clock, interval_s=1.0)
        agent.cycle()  # warm-up: first reads set baselines and open files
        for fn in (*reads.values(), sink_fn):
            fn.cpu_s = 0.0  # type: ignore[attr-defined]
        started_cpu, started_wall = time.process_time(), time.perf_counter()
        with log_file.open("a") as handle:
            for _ in range(cycles):
                handle.write((XID_LINE + "\n") * log_lines_per_cycle)
                handle.flush()
                agent.cycle()
        cpu_s = (time.process_time() - started_cpu) / cycles
        wall_s = (time.perf_counter() - started_wall) / cycles
        spool.close()
    del sink
    per_collector = {name: round(fn.cpu_s / cycles * 1e6, 1) for name, fn in reads.items()}  # type: ignore[attr-defined]
    per_collector["encode + spool append"] = round(sink_fn.cpu_s / cycles * 1e6, 1)  # type: ignore[attr-defined]
    pct = cpu_s / 1.0 * 100
    return {"cycles": cycles, "cpu_us_per_cycle": round(cpu_s * 1e6, 1), "wall_us_per_cycle": round(wall_s * 1e6, 1),
            "cpu_pct_of_core_at_1hz": round(pct, 4), "goal_pct_at_1hz": GOAL_PCT_AT_1HZ,
            "meets_goal": pct <= GOAL_PCT_AT_1HZ, "cpu_us_by_part": per_collector}


def render_agent(result: dict[str, Any]) -> str:
    rows = [{"part": k, "cpu_us": v} for k, v in result["cpu_us_by_part"].items()]
    rows.append({"part": "whole cycle", "cpu_us": result["cpu_us_per_cycle"]})
    verdict = "meets" if result["meets_goal"] else "MISSES"
    return (render(rows, [("part", "part of one cycle"), ("cpu_us", "cpu us")]) +
            f"\n\n{result['cycles']} cycles: {result['cpu_us_per_cycle']} us CPU per cycle = "
            f"{result['cpu_pct_of_core_at_1hz']} % of one core at 1 Hz ({verdict} the goal of "
            f"{result['goal_pct_at_1hz']} %)")
