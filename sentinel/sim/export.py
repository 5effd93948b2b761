"""``sentinel sim export``: a scenario's ground truth and telemetry as a labelled training set on disk.

Layout of DIR:
- ``scenario.json``: the scenario, normalised;
- ``truth.csv``: one row per ground-truth event (``groundtruth.TruthEvent``);
- ``logs.csv``: every kernel-log Xid the fleet wrote (t_s, node, gpu, xid);
- ``telemetry-NNNNN.npz``: chunks of ``chunk_steps`` steps; arrays shaped (steps, nodes, gpus) or (steps, nodes)
  for the InfiniBand port and boot counter, plus ``t_s`` (steps,). Node i is ``groundtruth.node_name(i)``.
Chunks keep memory flat whatever the scenario's size.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import numpy as np

from sentinel.sim import groundtruth
from sentinel.sim.fleet import Fleet, Step
from sentinel.sim.scenario import Scenario

FIELDS = ("temp_c", "power_w", "util_pct", "sm_clock_mhz", "throttle", "lost", "ecc_sbe", "ecc_dbe", "remap_pending",
          "pcie_replay", "nvlink_crc", "nvlink_replay", "pcie_downtrained", "ib_symbol_error",
          "ib_link_error_recovery", "ib_link_downed", "boot", "job", "ib_xmit_words")
FLOATS = {"temp_c", "power_w", "util_pct", "sm_clock_mhz"}


def export(sc: Scenario, out: Path, chunk_steps: int = 1000, max_steps: int | None = None,
           progress: Callable[[float], None] | None = None) -> dict[str, int]:
    out.mkdir(parents=True, exist_ok=True)
    truth = groundtruth.plan(sc)
    (out / "scenario.json").write_text(json.dumps(msgspec.to_builtins(sc), indent=2))
    groundtruth.export_csv(truth, out / "truth.csv")
    fleet = Fleet(sc, truth)
    steps = int(sc.duration_s / sc.step_s) if max_steps is None else min(max_steps, int(sc.duration_s / sc.step_s))
    chunks = logs = 0
    with (out / "logs.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["t_s", "node", "gpu", "xid"])
        buffer: list[Step] = []
        for k in range(steps):
            step = fleet.step()
            for node, gpu, code, _ in step.logs:
                writer.writerow([step.t_s, groundtruth.node_name(node), gpu, code])
                logs += 1
            buffer.append(step)
            if len(buffer) == chunk_steps or k == steps - 1:
                _write_chunk(out / f"telemetry-{chunks:05d}.npz", buffer)
                chunks, buffer = chunks + 1, []
                if progress is not None:
                    progress((k + 1) / steps)
    return {"steps": steps, "chunks": chunks, "events": len(truth), "logs": logs}


def _write_chunk(path: Path, steps: list[Step]) -> None:
    arrays = {"t_s": np.array([s.t_s for s in steps])}
    for name in FIELDS:
        stacked = np.stack([getattr(s, name) for s in steps])
        arrays[name] = stacked.astype(np.float32 if name in FLOATS else stacked.dtype)
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]
