"""Arrows flow downstream (design point 16, docs/architecture.md "Rooms and arrows"): read from the source with
``ast``, no two rooms import each other (no cycle at all), and the product never imports benchmarks or tests.

A room is a subpackage of ``sentinel`` (``sentinel.store``; the layout's top-level folders ``collectors``,
``models``, ``benchmarks`` and ``migrations`` are the subpackages ``sentinel.collectors`` ... through symlinks)
or a top-level module (``sentinel.events``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# folder -> its import name (the top-level folders are imported only under ``sentinel``)
PACKAGES = {"sentinel": "sentinel", "collectors": "sentinel.collectors", "models": "sentinel.models",
            "benchmarks": "sentinel.benchmarks", "migrations": "sentinel.migrations"}
# Arrows that must never exist, whatever else changes: (from room prefix, to room prefix, why)
FORBIDDEN = [
    ("sentinel", "sentinel.benchmarks", "the product does not depend on its benchmarks"),
    ("sentinel", "tests", "the product does not depend on its tests"),
    ("sentinel.models", "sentinel.detector", "models are the floor below the detector"),
    ("sentinel.models", "sentinel.store", "models are pure"),
    ("sentinel.collectors", "sentinel.actuator", "collectors read; they do not borrow the actuator"),
    ("sentinel.store", "sentinel.policy", "the store holds records, not judgement"),
    ("sentinel.events", "sentinel.", "the vocabulary is the floor"),
]


def room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] not in ("sentinel", "tests"):
        return None
    if parts[0] != "sentinel" or len(parts) == 1:
        return parts[0]
    return ".".join(parts[:2])


def sources() -> list[tuple[Path, str]]:
    """Every product and benchmark file with its module name (read from the real folders, not the symlinks)."""
    found = []
    for folder, name in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            found.append((path, ".".join([name, *path.relative_to(ROOT / folder).with_suffix("").parts])))
    return found


def imported_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def imports() -> dict[str, dict[str, set[str]]]:
    """room -> imported room -> the files with such an import (module level or inside functions alike)."""
    found: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path, module in sources():
        source = room(module)
        assert source is not None
        for name in imported_names(path):
            target = room(name)
            if target is not None and target != source:
                found[source][target].add(str(path.relative_to(ROOT)))
    return found


def test_every_import_name_is_under_sentinel() -> None:
    """The wheel installs one top-level package: nothing imports the folders by their top-level names, and
    the symlinks that make them subpackages point at them."""
    for folder in PACKAGES:
        if folder != "sentinel":
            link = ROOT / "sentinel" / folder
            assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve(), link
    tops = {folder for folder in PACKAGES if folder != "sentinel"}
    stray = [(str(path.relative_to(ROOT)), name) for path, _ in sources() for name in imported_names(path)
             if name.split(".")[0] in tops]
    stray += [(str(path.relative_to(ROOT)), name) for path in (ROOT / "tests").rglob("*.py")
              for name in imported_names(path) if name.split(".")[0] in tops]
    assert stray == []


def test_no_two_rooms_import_each_other_and_there_is_no_cycle() -> None:
    graph = imports()
    pairs = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph.get(b, {})})
    assert pairs == [], [(a, b, sorted(graph[a][b]), sorted(graph[b][a])) for a, b in pairs]
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, {}):
            if state.get(nxt) == 1:
                raise AssertionError(f"import cycle: {' -> '.join([*path[path.index(nxt):], nxt])}")
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])


def test_no_forbidden_arrow_exists() -> None:
    graph = imports()
    broken = [(a, b, why, sorted(files)) for a in graph for b, files in graph[a].items()
              for src, dst, why in FORBIDDEN
              if (a == src or a.startswith(src + ".")) and (b == dst.rstrip(".") or b.startswith(dst))]
    assert broken == []


def test_the_wall_clock_is_read_only_through_the_clock_module() -> None:
    """Every wall-clock read goes through ``sentinel.clock`` (so tests and the simulator can move time);
    ``time.monotonic`` and ``time.perf_counter`` measure durations and are fine."""
    readers = []
    for package in ("sentinel", "collectors", "models", "migrations"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "sentinel" / "clock.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(node, ast.Attribute) and node.attr == "time" and isinstance(node.value, ast.Name)
                        and node.value.id == "time"):
                    readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert readers == []
