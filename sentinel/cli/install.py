"""``sentinel install``: lay out what a host needs from what the package ships (docs/operations.md, "Install").

Under a prefix (``/`` on a real host, a scratch folder to look first): the systemd units with ``ExecStart`` pointing
at this installation's ``sentinel``, ``etc/sentinel/sentinel.toml`` (central services and the CLI) and
``etc/sentinel/agent.toml`` (the node agent) written once and never overwritten, and the command-signing key
(``sentinel keygen``) created once. Units are the package's own and are replaced when they differ; local changes
belong in drop-ins (``systemctl edit``). Alert rules, dashboard and samples stay under the share folder, named in
the output, because where a site's Prometheus and Grafana read them differs per site.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path

from sentinel.errors import ConfigError

UNIT_BIN = "/opt/sentinel/venv/bin/"  # what the units in systemd/ name; replaced by this installation's bin folder
ETC = "/etc/sentinel/"


@dataclasses.dataclass(frozen=True)
class Shipped:
    """Where this installation keeps the files it ships: a wheel's ``<prefix>/share/sentinel`` or a checkout."""

    units: Path
    example_config: Path
    rules: Path
    dashboards: Path
    samples: Path

    @classmethod
    def find(cls) -> Shipped:
        share = Path(sys.prefix) / "share" / "sentinel"
        if (share / "systemd").is_dir():
            return cls(share / "systemd", share / "sentinel.example.toml", share / "prometheus", share / "grafana",
                       share)
        tree = Path(__file__).resolve().parents[2]  # an editable install runs from the checkout
        if (tree / "systemd").is_dir() and (tree / "docs" / "sentinel.example.toml").is_file():
            return cls(tree / "systemd", tree / "docs" / "sentinel.example.toml", tree / "deploy" / "prometheus",
                       tree / "deploy" / "grafana", tree / "deploy")
        raise ConfigError(f"no shipped files under {share} or a source checkout; reinstall the sentinel-gpu wheel")


@dataclasses.dataclass(frozen=True)
class Step:
    path: Path
    kind: str  # "unit" (replaced when different) | "config" (written once) | "key" (created once) | "dir"
    mode: int
    text: str = ""


def _under(prefix: Path, absolute: str) -> str:
    if str(prefix) == "/":
        return absolute
    return str(prefix / absolute.lstrip("/")) + ("/" if absolute.endswith("/") else "")


def plan(prefix: Path, shipped: Shipped, bin_dir: Path) -> list[Step]:
    """What to write under ``prefix``; pure apart from reading the shipped files."""
    etc = _under(prefix, ETC)
    steps = []
    for unit in sorted(shipped.units.glob("*.service")):
        text = unit.read_text(encoding="utf-8").replace(UNIT_BIN, f"{bin_dir}/").replace(ETC, etc)
        steps.append(Step(Path(_under(prefix, "/etc/systemd/system")) / unit.name, "unit", 0o644, text))
    key = f"{etc}command.key"
    store = _under(prefix, "/var/lib/sentinel/sentinel.db")  # the units' StateDirectory=sentinel
    config = shipped.example_config.read_text(encoding="utf-8")
    header = (f"# Written by `sentinel install`; every key is explained in {shipped.example_config}.\n"
              "# For PostgreSQL set store.url_file to a file (mode 0640) holding the URL (docs/operations.md).\n")
    config = _setting(config, "security", "key_file", key)
    config = _setting(config, "store", "url", f"sqlite:///{store}")
    steps.append(Step(Path(f"{etc}sentinel.toml"), "config", 0o640, header + config))
    agent = ("# Written by `sentinel install`: the node agent's config (docs/agent.md; every key in\n"
             f"# {shipped.example_config}). Set your brokers; the node name must match the scheduler's.\n"
             "[transport]\nkind = \"kafka\"\n\n[transport.kafka]\nbootstrap = \"localhost:9092\"\n")
    steps.append(Step(Path(f"{etc}agent.toml"), "config", 0o640, agent))
    steps.append(Step(Path(key), "key", 0o600))
    steps.append(Step(Path(store).parent, "dir", 0o750))  # systemd creates it too; `sentinel db upgrade` needs it now
    return steps


def _setting(text: str, section: str, key: str, value: str) -> str:
    """Set ``key = "..."`` in the example's ``[section]`` (its comment kept); the example must have it."""
    pattern = re.compile(rf'^(\[{re.escape(section)}\][^\[]*?^){key} = "[^"\n]*"', re.MULTILINE | re.DOTALL)
    if not pattern.search(text):
        raise ConfigError(f"the shipped example config has no `{key} = \"...\"` in [{section}] to fill in")
    return pattern.sub(lambda m: f'{m.group(1)}{key} = "{value}"', text, count=1)


def apply(steps: list[Step], dry_run: bool) -> list[dict[str, str]]:
    """Write what is missing or (units only) different; report each path with what was done."""
    from sentinel.actuator.signing import write_key

    done = []
    for step in steps:
        exists = step.path.exists()
        if exists and (step.kind == "dir" or step.kind == "unit" and step.path.read_text("utf-8") == step.text):
            action = "unchanged"
        elif step.kind != "unit" and exists:
            action = "kept (exists)"
        else:
            action = ("would " if dry_run else "") + ("replace" if exists else "write")
            if not dry_run:
                step.path.parent.mkdir(parents=True, exist_ok=True)
                if step.kind == "key":
                    write_key(str(step.path))
                elif step.kind == "dir":
                    step.path.mkdir(mode=step.mode)
                else:
                    _write(step.path, step.text, step.mode)
                if step.kind != "unit":
                    _give_to_service_user(step.path, own=step.kind != "config")
        done.append({"path": str(step.path), "kind": step.kind, "mode": f"{step.mode:04o}", "action": action})
    return done


def _give_to_service_user(path: Path, own: bool) -> None:
    """As root with the ``sentinel`` system user present (step 1 of the install): configs root:sentinel 0640, the
    key sentinel:sentinel 0600 and the state folder sentinel's, so the services can read them and nobody else."""
    import grp
    import pwd

    if os.geteuid() != 0:
        return
    try:
        user, group = pwd.getpwnam("sentinel").pw_uid, grp.getgrnam("sentinel").gr_gid
    except KeyError:
        return
    os.chown(path, user if own else 0, group)


def _write(path: Path, text: str, mode: int) -> None:
    """Write through a temporary file with its final mode from the start (a config may hold secrets later)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), mode)
        handle.write(text)
    os.replace(tmp, path)
