"""The real Prometheus tools the tests call (Debian `prometheus`; tests/debian-deps.sh installs it)."""

from __future__ import annotations

import shutil
import subprocess


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: `make test` installs Debian's prometheus package (tests/debian-deps.sh)"
    return path


def check_metrics(exposition: bytes | str) -> str:
    """Run `promtool check metrics` on an exposition; return its complaints ('' when clean)."""
    data = exposition.encode() if isinstance(exposition, str) else exposition
    result = subprocess.run([tool("promtool"), "check", "metrics"], input=data, capture_output=True, timeout=60)
    return (result.stdout + result.stderr).decode().strip() + ("" if result.returncode == 0 else " (rc != 0)")
