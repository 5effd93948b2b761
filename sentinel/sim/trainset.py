"""Training the hazard model on simulated fleets: from a scenario in memory, or from ``sentinel sim export``
directories on disk (the same arrays either way, fed to ``models.training``).

``TRAIN_SCENARIO`` is the shipped training scenario; its seed differs from every scenario the benchmarks score,
so a benchmark never scores the stream its model learned from. A fleet never looks like its training scenario,
so the cached model learns from ``SHIFTED_FLEETS`` fleets drawn from it (``training_fleets``), each with its
own sensor noise, background strength, sampling interval, GPUs per node, job shape and load: what must not
matter is varied, so the model cannot learn it.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from sentinel.clock import ManualClock
from sentinel.errors import ConfigError
from sentinel.sim import background, groundtruth, scenario
from sentinel.sim import fleet as fleet_module
from sentinel.sim.fleet import Fleet
from sentinel.sim.groundtruth import TruthEvent
from sentinel_models import features, hazard, persistence, shipped, training
from sentinel_models.training import Dataset, Failure, build_dataset

TRAIN_SCENARIO = "train"
HORIZON_S = 7200.0
WINDOW_SAMPLES = 60  # the detector's default window
TARGET_PRECISION = 0.95
SHIFTED_FLEETS = 6
SHIFT_NODES = 80
SHIFT_DURATION_S = 86_400.0
SHIPPED_FOLDER = "hazard"  # models/sentinel_models/shipped/<this>
RECIPE_TS = 1_796_601_600.0  # 2026-12-07T00:00:00Z: the shipped model's created_ts (the recipe's date)


def training_fleets(base: scenario.Scenario, count: int = SHIFTED_FLEETS) -> list[scenario.Scenario]:
    """``count`` fleets unlike each other, with ``base``'s fault and benign rates: sensor noise 0.3-2 C and
    4-25 W, background rates x0.3-3, sampling every 5-30 s, 4 or 8 GPUs per node, jobs of 1-8 nodes, busy
    60-95 % of the time with a daily cycle up to 0.6. Drawn from ``base``'s seed; each fleet has its own."""
    rng = np.random.default_rng([base.seed, 20_261_203])
    out = []
    for k in range(count):
        gpus = int(rng.choice([4, 8, 8]))
        out.append(msgspec.structs.replace(
            base, name=f"{base.name}-{k}", seed=base.seed * 100 + k, nodes=SHIFT_NODES, gpus_per_node=gpus,
            duration_s=SHIFT_DURATION_S, step_s=float(rng.choice([5.0, 10.0, 10.0, 15.0, 30.0])),
            job_nodes=int(rng.choice([1, 2, 4, 8])), busy_fraction=float(rng.uniform(0.6, 0.95)),
            daily_amplitude=float(rng.uniform(0.0, 0.6)),
            noise=scenario.Noise(temp_sd_c=float(rng.uniform(0.3, 2.0)), power_sd_w=float(rng.uniform(4.0, 25.0))),
            background=base.background.scaled(float(np.exp(rng.uniform(np.log(0.3), np.log(3.0)))))))
    return out


def failures(truth: list[TruthEvent], index: dict[str, int]) -> list[Failure]:
    """The faults a drain should pre-empt, as the trainer's labels."""
    return [Failure(index[e.node], e.gpu, e.failure_s) for e in truth if e.kind == "fault" and e.needs_drain]


def scenario_dataset(name: str | scenario.Scenario, window: int, horizon_s: float, max_steps: int | None = None,
                     progress: Callable[[float], None] | None = None) -> tuple[Dataset, str]:
    """Rows from a scenario (a name, a file or a loaded one) generated in memory, and a hash of what generated
    them."""
    sc = scenario.load(name) if isinstance(name, str) else name
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


def shifted_dataset(base: str, window: int, horizon_s: float,
                    progress: Callable[[float], None] | None = None) -> tuple[Dataset, str]:
    """Rows from every fleet ``training_fleets`` draws from scenario ``base``, kept apart by node."""
    fleets = training_fleets(scenario.load(base))
    parts, digests = [], []
    for k, sc in enumerate(fleets):
        share = (lambda f, k=k: progress((k + f) / len(fleets))) if progress is not None else None
        data, digest = scenario_dataset(sc, window, horizon_s, progress=share)
        parts.append(data)
        digests.append(digest)
    return training.combine(parts), hashlib.sha256("".join(digests).encode()).hexdigest()


def recipe_digest() -> str:
    """SHA-256 of what the shipped model's training depends on: the fleets drawn and the code that simulates them,
    computes the features and fits the model. ``sentinel model show shipped`` says whether it still matches."""
    recipe = hashlib.sha256(msgspec.json.encode(training_fleets(scenario.load(TRAIN_SCENARIO))))
    for module in (features, training, hazard, persistence, background, fleet_module, groundtruth,
                   sys.modules[__name__]):
        recipe.update(Path(str(module.__file__)).read_bytes())
    return recipe.hexdigest()


def train_shipped(root: Path, progress: Callable[[float], None] | None = None) -> Path:
    """Train the shipped model by its recipe into ``root/hazard`` (replacing what is there) and return that
    folder. Byte for byte reproducible on the same versions of Python, numpy and scikit-learn: every draw is
    seeded and the description carries the recipe's date, not the training time."""
    fleets = training_fleets(scenario.load(TRAIN_SCENARIO))
    data, digest = shifted_dataset(TRAIN_SCENARIO, WINDOW_SAMPLES, HORIZON_S, progress)
    model = hazard.fit(data, HORIZON_S, TARGET_PRECISION)
    model.report["window_samples"] = WINDOW_SAMPLES
    recipe = {"command": "sentinel train --recipe shipped", "scenario": TRAIN_SCENARIO,
              "fleets": [{"name": f.name, "seed": f.seed, "nodes": f.nodes, "gpus_per_node": f.gpus_per_node,
                          "duration_s": f.duration_s, "step_s": f.step_s, "job_nodes": f.job_nodes,
                          "temp_sd_c": round(f.noise.temp_sd_c, 3), "power_sd_w": round(f.noise.power_sd_w, 3)}
                         for f in fleets],
              "horizon_s": HORIZON_S, "target_precision": TARGET_PRECISION, "window_samples": WINDOW_SAMPLES,
              "digest": recipe_digest()}
    staging = root / f".staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    persistence.save(model, staging, shipped.NAME, digest, f"{len(fleets)} fleets drawn from scenario "
                     f"{TRAIN_SCENARIO} (the shipped recipe)", clock=ManualClock(RECIPE_TS), recipe=recipe,
                     folder=SHIPPED_FOLDER)
    target = root / SHIPPED_FOLDER
    shutil.rmtree(target, ignore_errors=True)
    os.rename(staging / SHIPPED_FOLDER, target)
    shutil.rmtree(staging, ignore_errors=True)
    return target


def pin_shipped(directory: Path, module: Path) -> dict[str, str]:
    """Write the SHA-256 of the shipped model's files into ``module`` (sentinel_models/shipped.py's PINNED_SHA256)."""
    pins = {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
            for name in (persistence.MODEL_FILE, persistence.META_FILE)}
    text = module.read_text()
    for name, value in pins.items():
        text = re.sub(rf'("{re.escape(name)}": )"[0-9a-f]*"', rf'\g<1>"{value}"', text)
    module.write_text(text)
    return pins


def cached_model(progress: Callable[[str], None] | None = None) -> str:
    """The model the benchmarks score by default: the shipped one (benchmarks score what ships)."""
    del progress  # nothing to train: the model comes with the package
    return str(shipped.DIRECTORY)
