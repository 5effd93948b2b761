"""Training the hazard model on simulated fleets: from a scenario in memory, or from ``sentinel sim export``
directories on disk (the same arrays either way, fed to ``models.training``).

``TRAIN_SCENARIO`` is the shipped training scenario; its seed differs from every scenario the benchmarks score,
so a benchmark never scores the stream its model learned from.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from models import features, hazard, persistence, training
from models.training import Dataset, Failure, build_dataset
from sentinel.errors import ConfigError
from sentinel.sim import groundtruth, scenario
from sentinel.sim.fleet import Fleet
from sentinel.sim.groundtruth import TruthEvent

TRAIN_SCENARIO = "train"
HORIZON_S = 7200.0
WINDOW_SAMPLES = 60  # the detector's default window
TARGET_PRECISION = 0.95


def failures(truth: list[TruthEvent], index: dict[str, int]) -> list[Failure]:
    """The faults a drain should pre-empt, as the trainer's labels."""
    return [Failure(index[e.node], e.gpu, e.failure_s) for e in truth if e.kind == "fault" and e.needs_drain]


def scenario_dataset(name: str, window: int, horizon_s: float, max_steps: int | None = None,
                     progress: Callable[[float], None] | None = None) -> tuple[Dataset, str]:
    """Rows from a scenario generated in memory, and a hash of what generated them."""
    sc = scenario.load(name)
    truth = groundtruth.plan(sc)
    fleet = Fleet(sc, truth)
    steps = int(sc.duration_s / sc.step_s) if max_steps is None else min(max_steps, int(sc.duration_s / sc.step_s))

    def stream() -> Iterator[dict[str, Any]]:
        for _ in range(steps):
            yield vars(fleet.step())

    data = build_dataset(stream(), failures(truth, fleet.index), window=window, horizon_s=horizon_s,
                         seed=sc.seed, progress=progress, total_steps=steps)
    digest = hashlib.sha256(msgspec.json.encode(sc) + str(steps).encode()).hexdigest()
    return data, digest


def export_dataset(directory: Path, window: int, horizon_s: float,
                   progress: Callable[[float], None] | None = None) -> tuple[Dataset, str]:
    """Rows from a ``sentinel sim export`` directory, and the hash of its files."""
    chunks = sorted(directory.glob("telemetry-*.npz"))
    needed = [directory / "scenario.json", directory / "truth.csv", directory / "logs.csv"]
    missing = [p.name for p in needed if not p.is_file()]
    if missing or not chunks:
        raise ConfigError(f"{directory}: not a training export (missing {missing or 'telemetry-*.npz'}); "
                          "make one with `sentinel sim export SCENARIO --out DIR`")
    nodes = int(json.loads((directory / "scenario.json").read_text())["nodes"])
    index = {groundtruth.node_name(i): i for i in range(nodes)}
    with (directory / "truth.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    fails = [Failure(index[r["node"]], int(r["gpu"]), float(r["failure_s"])) for r in rows
             if r["kind"] == "fault" and r["needs_drain"] == "True"]
    logs: dict[float, list[tuple[int, int, int]]] = {}
    with (directory / "logs.csv").open(newline="", encoding="utf-8") as handle:
        for r in csv.DictReader(handle):
            logs.setdefault(float(r["t_s"]), []).append((index[r["node"]], int(r["gpu"]), int(r["xid"])))

    def stream() -> Iterator[dict[str, Any]]:
        for chunk in chunks:
            with np.load(chunk) as arrays:
                data = {name: arrays[name] for name in arrays.files}
            for k, t in enumerate(data["t_s"]):
                step = {name: values[k] for name, values in data.items() if name != "t_s"}
                yield {**step, "t_s": float(t), "logs": logs.get(float(t), [])}

    data = build_dataset(stream(), fails, window=window, horizon_s=horizon_s, progress=progress,
                         total_steps=len(chunks) * 1000)
    return data, persistence.hash_files(needed + chunks)


def cached_model(progress: Callable[[str], None] | None = None) -> str:
    """The directory of the model trained on ``TRAIN_SCENARIO`` with this version's code, training it on first
    use (about a minute and a half on 2 cores) into ``$SENTINEL_CACHE`` (default ~/.cache/sentinel)."""
    root = Path(os.environ.get("SENTINEL_CACHE") or Path.home() / ".cache" / "sentinel") / "models"
    recipe = hashlib.sha256(msgspec.json.encode(scenario.load(TRAIN_SCENARIO)))
    for module in (features, training, hazard):
        recipe.update(Path(str(module.__file__)).read_bytes())
    name = f"{TRAIN_SCENARIO}-{recipe.hexdigest()[:16]}"
    if (root / name / persistence.META_FILE).is_file():
        return str(root / name)
    if progress is not None:
        progress(f"training the hazard model on scenario {TRAIN_SCENARIO!r} (first use of this version; cached in "
                 f"{root})")
    data, digest = scenario_dataset(TRAIN_SCENARIO, WINDOW_SAMPLES, HORIZON_S)
    model = hazard.fit(data, HORIZON_S, TARGET_PRECISION)
    staging = root / f".staging-{os.getpid()}"  # saved whole, then moved into place: readers never see half
    persistence.save(model, staging, name, digest, f"scenario {TRAIN_SCENARIO}")
    with contextlib.suppress(OSError):  # another process cached the same model first: keep theirs
        os.rename(staging / name, root / name)
    shutil.rmtree(staging, ignore_errors=True)
    return str(root / name)
