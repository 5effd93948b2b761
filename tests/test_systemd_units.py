"""Every unit in systemd/ passes `systemd-analyze verify` with nothing on stderr (warnings exit 0 there)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = sorted((Path(__file__).resolve().parent.parent / "systemd").glob("*.service"))
INSTALL_PREFIX = "/opt/sentinel/venv/bin/"


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_verifies_cleanly(unit: Path, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: `make test` expects Debian's systemd package"
    # As an installer would: point ExecStart at where the project is installed here.
    text = unit.read_text().replace(INSTALL_PREFIX, str(Path(sys.executable).parent) + "/")
    copy = tmp_path / unit.name
    copy.write_text(text)
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


def test_there_is_at_least_one_unit() -> None:
    assert UNITS
