"""``sentinel-bench sim``: how fast the simulator generates a fleet (arrays) and its wire records."""

from __future__ import annotations

import time
from typing import Any

from sentinel.sim import groundtruth, scenario
from sentinel.sim.fleet import Fleet
from sentinel.tables import render


def run_sim_bench(name: str = "llama3-mix", steps: int = 360, record_steps: int = 3,
                  background: bool = True) -> dict[str, Any]:
    sc = scenario.load(name)
    if not background:
        sc = sc.clean()
    truth = groundtruth.plan(sc)
    fleet = Fleet(sc, truth)
    started = time.perf_counter()
    last = None
    for _ in range(steps):
        last = fleet.step()
    arrays_s = time.perf_counter() - started
    assert last is not None
    started = time.perf_counter()
    for _ in range(record_steps):
        fleet.samples(last)
    records_s = (time.perf_counter() - started) / record_steps
    gpus = sc.nodes * sc.gpus_per_node
    return {"scenario": sc.name, "background": sc.background.enabled, "nodes": sc.nodes, "gpus": gpus, "steps": steps,
            "gpu_samples_per_s": round(steps * gpus / arrays_s),
            "record_gpu_samples_per_s": round(gpus / records_s), "goal_gpu_samples_per_s": 1_000_000,
            "simulated_s_per_wall_s": round(steps * sc.step_s / arrays_s)}


def render_sim(r: dict[str, Any]) -> str:
    rows = [{"what": "fleet arrays (numpy)", "rate": r["gpu_samples_per_s"]},
            {"what": "as TelemetrySample records", "rate": r["record_gpu_samples_per_s"]}]
    world = "realistic" if r["background"] else "clean"
    return (f"{r['scenario']} ({world} background): {r['nodes']} nodes, {r['gpus']} GPUs, {r['steps']} steps\n"
            + render(rows, [("what", "generation"), ("rate", "GPU-samples/s")])
            + f"\n\ngoal >= {r['goal_gpu_samples_per_s']:,} GPU-samples/s; simulated time runs "
              f"{r['simulated_s_per_wall_s']:,}x faster than wall time")
