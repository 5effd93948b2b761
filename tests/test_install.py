"""`sentinel install --prefix` (issue 17): lays out units pointing at this installation, configs and the command
key once, never overwrites a config or key, replaces units that differ, and writes nothing on --dry-run."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

SENTINEL = str(Path(sys.executable).parent / "sentinel")


def install(prefix: Path, *extra: str) -> dict:
    done = subprocess.run([SENTINEL, "install", "--prefix", str(prefix), "-o", "json", *extra], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {Path(f["path"]).relative_to(prefix).as_posix(): f for f in json.loads(done.stdout)["files"]}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_install_lays_out_units_configs_and_key_once(tmp_path: Path) -> None:
    dry = install(tmp_path, "--dry-run")
    assert {f["action"] for f in dry.values()} == {"would write"} and list(tmp_path.iterdir()) == []

    first = install(tmp_path)
    assert first["etc/sentinel/command.key"]["action"] == "write"
    etc = tmp_path / "etc" / "sentinel"
    assert mode(etc / "command.key") == 0o600 and mode(etc / "sentinel.toml") == 0o640
    assert f'key_file = "{etc}/command.key"' in (etc / "sentinel.toml").read_text()
    unit = tmp_path / "etc" / "systemd" / "system" / "sentinel-controller.service"
    assert f"ExecStart={SENTINEL} controller --config {etc}/sentinel.toml" in unit.read_text()

    key, config = (etc / "command.key").read_text(), (etc / "sentinel.toml").read_text() + "# mine\n"
    (etc / "sentinel.toml").write_text(config)
    unit.write_text(unit.read_text() + "# edited\n")
    second = install(tmp_path)
    assert second["etc/sentinel/command.key"]["action"] == "kept (exists)"
    assert second["etc/sentinel/sentinel.toml"]["action"] == "kept (exists)"
    assert second["etc/systemd/system/sentinel-controller.service"]["action"] == "replace"
    assert second["etc/systemd/system/sentinel-agent.service"]["action"] == "unchanged"
    assert (etc / "command.key").read_text() == key and (etc / "sentinel.toml").read_text() == config
    assert "# edited" not in unit.read_text()


def test_install_wants_an_absolute_prefix() -> None:
    done = subprocess.run([SENTINEL, "install", "--prefix", "relative/dir"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "absolute" in done.stderr
