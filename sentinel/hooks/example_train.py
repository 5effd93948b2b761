"""A small data-parallel training job wired to Sentinel's checkpoint hook (docs/hooks.md shows it in full).

Run one process per rank, e.g. ``srun python -m sentinel.hooks.example_train --checkpoint-dir DIR --steps 100``
in a batch script (docs/hooks.md). Ranks come from Slurm (SLURM_PROCID, SLURM_NTASKS) or torchrun (RANK,
WORLD_SIZE); CPU and gloo, so it runs anywhere. The end-to-end test and ``sentinel-bench actuate`` use it; each
completed step is appended to ``--progress`` as ``<restart> <step> <resumed from>`` by rank 0, so they can tell
what work a restart lost.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from sentinel.hooks.torch import CheckpointHook, TrainState


def init_distributed() -> tuple[int, int]:
    rank = int(os.environ.get("SLURM_PROCID", os.environ.get("RANK", "0")))
    world = int(os.environ.get("SLURM_NTASKS", os.environ.get("WORLD_SIZE", "1")))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    return rank, world


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-s", type=float, default=0.5, help="extra time per step (stands in for compute)")
    parser.add_argument("--every", type=int, default=0, help="also checkpoint every N steps (0: only on request)")
    parser.add_argument("--progress", help="file rank 0 appends '<restart> <step> <resumed from>' to per step")
    args = parser.parse_args()
    rank, _ = init_distributed()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                                        torch.nn.Linear(64, 1)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    hook = CheckpointHook({"train": TrainState(model, optimizer)}, args.checkpoint_dir, every_steps=args.every)
    start = hook.restore()
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    data = torch.Generator().manual_seed(rank)
    for step in range(start, args.steps):
        x = torch.randn(32, 64, generator=data)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.step_s)
        if rank == 0 and args.progress:
            with open(args.progress, "a") as f:
                f.write(f"{restart} {step + 1} {start}\n")
        hook.after_step(step + 1)
    hook.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
