"""Arrows flow downstream (design point 16, docs/architecture.md "Rooms and arrows"): read from the source with
``ast``, no two rooms import each other (no cycle at all), and the product never imports benchmarks or tests.

A room is a top-level package (``collectors``, ``models``, ``benchmarks``) or, inside ``sentinel``, a
subpackage (``sentinel.store``) or a top-level module (``sentinel.events``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sentinel", "collectors", "models", "benchmarks")
# Arrows that must never exist, whatever else changes: (from room prefix, to room prefix, why)
FORBIDDEN = [
    ("sentinel", "benchmarks", "the product does not depend on its benchmarks"),
    ("collectors", "benchmarks", "the product does not depend on its benchmarks"),
    ("models", "benchmarks", "the product does not depend on its benchmarks"),
    ("sentinel", "tests", "the product does not depend on its tests"),
    ("models", "sentinel.detector", "models are the floor below the detector"),
    ("models", "sentinel.store", "models are pure"),
    ("collectors", "sentinel.actuator", "collectors read; they do not borrow the actuator"),
    ("sentinel.store", "sentinel.policy", "the store holds records, not judgement"),
    ("sentinel.events", "sentinel.", "the vocabulary is the floor"),
]


def room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] not in (*PACKAGES, "tests"):
        return None
    if parts[0] != "sentinel" or len(parts) == 1:
        return parts[0]
    return ".".join(parts[:2])


def imports() -> dict[str, dict[str, set[str]]]:
    """room -> imported room -> the files with such an import (module level or inside functions alike)."""
    found: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            source = room(".".join(parts))
            assert source is not None
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                for name in names:
                    target = room(name)
                    if target is not None and target != source:
                        found[source][target].add(str(path.relative_to(ROOT)))
    return found


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
    for package in ("sentinel", "collectors", "models"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "sentinel" / "clock.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(node, ast.Attribute) and node.attr == "time" and isinstance(node.value, ast.Name)
                        and node.value.id == "time"):
                    readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert readers == []
