"""Host collector: boot id (to notice reboots), uptime, load, CPU, memory (procfs) and disk use.

Reads only; the proc root is injectable so tests use a recorded tree.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sentinel.events import HostReading


class HostCollector:
    name = "host"

    def __init__(self, proc_root: str | Path = "/proc", disk_path: str | Path = "/") -> None:
        self.root = Path(proc_root)
        self.disk_path = Path(disk_path)
        self._last_cpu: tuple[int, int] | None = None  # (busy jiffies, total jiffies)

    def _text(self, relative: str) -> str:
        return (self.root / relative).read_text(encoding="ascii", errors="replace")

    def read(self) -> HostReading:
        boot_id = self._text("sys/kernel/random/boot_id").strip()[:64]
        uptime_s = float(self._text("uptime").split()[0])
        loads = self._text("loadavg").split()
        meminfo = {}
        for line in self._text("meminfo").splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                meminfo[key] = int(parts[0]) * 1024  # values are in kB
        return HostReading(
            boot_id=boot_id,
            uptime_s=uptime_s,
            load1=float(loads[0]),
            load5=float(loads[1]),
            cpu_util_pct=self._cpu_util(),
            mem_total_bytes=meminfo.get("MemTotal"),
            mem_available_bytes=meminfo.get("MemAvailable"),
            disk_used_pct=self._disk(),
        )

    def _disk(self) -> float | None:
        try:
            usage = shutil.disk_usage(self.disk_path)
        except OSError:
            return None
        return round(100.0 * usage.used / usage.total, 2) if usage.total else None

    def _cpu_util(self) -> float | None:
        """CPU busy share since the previous read (None on the first read or after a counter reset)."""
        first = self._text("stat").splitlines()[0].split()
        values = [int(v) for v in first[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        total = sum(values[:8])
        current = (total - idle, total)
        previous, self._last_cpu = self._last_cpu, current
        if previous is None or current[1] <= previous[1] or current[0] < previous[0]:
            return None
        return round(100.0 * (current[0] - previous[0]) / (current[1] - previous[1]), 2)
