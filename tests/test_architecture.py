"""Arrows flow downstream (design point 16, docs/architecture.md "Rooms and arrows"): read from the source with
``ast``, no two rooms import each other (no cycle at all, between rooms or between the modules of one package),
and the product never imports benchmarks or tests.

The tree has five import roots (decision 0017): ``sentinel/`` and the layout's top-level folders, each holding one
package with a ``sentinel``-prefixed name (``collectors/sentinel_collectors``, ``models/sentinel_models``,
``migrations/sentinel_migrations``, ``benchmarks/sentinel_bench``). A room is a subpackage or top-level module of
``sentinel`` (``sentinel.store``, ``sentinel.events``) or one of the other roots as a whole (``sentinel_models``).
"""

from __future__ import annotations

import ast
import functools
import os
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# import name -> the folder that holds it (every file is reached by one path only)
PACKAGES = {"sentinel": ROOT / "sentinel", "sentinel_collectors": ROOT / "collectors" / "sentinel_collectors",
            "sentinel_models": ROOT / "models" / "sentinel_models",
            "sentinel_migrations": ROOT / "migrations" / "sentinel_migrations",
            "sentinel_bench": ROOT / "benchmarks" / "sentinel_bench"}
PRODUCT = ("sentinel", "sentinel_collectors", "sentinel_models", "sentinel_migrations")  # what the wheel holds
# Arrows that must never exist, whatever else changes: (from room prefix, to room prefix, why)
FORBIDDEN = [
    *[(product, "sentinel_bench", "the product does not depend on its benchmarks") for product in PRODUCT],
    *[(product, "tests", "the product does not depend on its tests") for product in PRODUCT],
    ("sentinel_models", "sentinel.detector", "models are the floor below the detector"),
    ("sentinel_models", "sentinel.store", "models are pure"),
    ("sentinel_collectors", "sentinel.actuator", "collectors read; they do not borrow the actuator"),
    ("sentinel.policy", "sentinel.store", "the policy is pure: it judges values, the store persists them"),
    ("sentinel.policy", "sentinel.transport", "the policy is pure: no I/O"),
    ("sentinel.events", "sentinel.", "the vocabulary is the floor"),
    ("sentinel.obs", "sentinel.config", "what counts sits below the configuration (issue 39)"),
]
# Wall-clock reads other than through sentinel.clock (durations from time.monotonic/perf_counter are fine)
WALL_CLOCK = {("time", "time"), ("time", "time_ns"), ("datetime", "now"), ("datetime", "utcnow"),
              ("datetime", "today"), ("date", "today")}


def room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "tests" or parts[0] in PACKAGES and parts[0] != "sentinel":
        return parts[0]
    if parts[0] != "sentinel":
        return None
    return ".".join(parts[:2])


def sources() -> list[tuple[Path, str]]:
    """Every product and benchmark file with its module name."""
    found = []
    for name, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            found.append((path, ".".join([name, *path.relative_to(folder).with_suffix("").parts])))
    return found


@functools.cache  # the tests below read the same files: parse each once
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def imported_names(path: Path, module: str = "") -> list[str]:
    """Absolute names imported by ``path`` (relative imports resolved against ``module``)."""
    names = []
    package = module.rsplit(".", 1)[0] if module and path.name != "__init__.py" else module
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], *filter(None, [base])])
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def imports() -> dict[str, dict[str, set[str]]]:
    """room -> imported room -> the files with such an import (module level or inside functions alike)."""
    found: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path, module in sources():
        source = room(module)
        assert source is not None
        for name in imported_names(path, module):
            target = room(name)
            if target is not None and target != source:
                found[source][target].add(str(path.relative_to(ROOT)))
    return found


def cycle(graph: dict[str, set[str]] | dict[str, dict[str, set[str]]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in graph.get(node, {}):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_every_file_is_in_one_place() -> None:
    """No symlink anywhere in the tree (each file has one path), and no import reaches a root by another name."""
    links = [str(Path(d, f).relative_to(ROOT)) for d, dirs, files in os.walk(ROOT)
             if not any(part.startswith(".") or part in ("node_modules", "build", "dist")
                        for part in Path(d).relative_to(ROOT).parts)
             for f in files + dirs if Path(d, f).is_symlink()]
    assert links == []
    old = ("sentinel.collectors", "sentinel.models", "sentinel.migrations", "sentinel.benchmarks", "collectors",
           "models", "migrations", "benchmarks", "bench")
    paths = [path for path, _ in sources()] + list((ROOT / "tests").rglob("*.py")) + \
        list((ROOT / "benchmarks" / "scripts").glob("*.py"))
    stray = [(str(path.relative_to(ROOT)), name) for path in paths for name in imported_names(path)
             if any(name == o or name.startswith(o + ".") for o in old)]
    assert stray == []


def test_no_two_rooms_import_each_other_and_there_is_no_cycle() -> None:
    graph = imports()
    pairs = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph.get(b, {})})
    assert pairs == [], [(a, b, sorted(graph[a][b]), sorted(graph[b][a])) for a, b in pairs]
    assert cycle(graph) is None


def test_no_cycle_between_the_modules_of_one_package() -> None:
    """Inside a package, too, imports go one way (a module that needs its sibling's name does not give one back)."""
    modules = {module: path for path, module in sources()}
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for name in imported_names(path, module):
            if name in modules and name != module and name.rsplit(".", 1)[0] == module.rsplit(".", 1)[0] \
                    and not name.endswith(".__init__") and modules[name].name != "__init__.py":
                graph[module].add(name)
    assert cycle(graph) is None


def test_no_forbidden_arrow_exists() -> None:
    graph = imports()
    broken = [(a, b, why, sorted(files)) for a in graph for b, files in graph[a].items()
              for src, dst, why in FORBIDDEN
              if (a == src or a.startswith(src + ".")) and (b == dst.rstrip(".") or b.startswith(dst))]
    assert broken == []


def test_the_wall_clock_is_read_only_through_the_clock_module() -> None:
    """Every wall-clock read (``time.time``, ``time.time_ns``, ``datetime.now`` ...) goes through ``sentinel.clock``,
    so tests and the simulator can move time; ``time.monotonic`` and ``time.perf_counter`` measure durations."""
    readers = []
    for path, module in sources():
        if module == "sentinel.clock" or module.startswith("sentinel_bench"):
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Attribute) and (
                    (isinstance(node.value, ast.Name) and (node.value.id, node.attr) in WALL_CLOCK)
                    or (isinstance(node.value, ast.Attribute) and (node.value.attr, node.attr) in WALL_CLOCK)):
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert readers == []
