"""The Slurm batch script that hands Sentinel's checkpoint signal to a job's tasks (docs/hooks.md).

Sentinel signals the batch shell (``scancel --signal=USR1 --batch``); the script's trap hands the signal to srun,
which forwards it to every task. Without the trap SIGUSR1 would end the shell, and the job with it.
"""

from __future__ import annotations

import shlex


def batch_script(python: str, ack_dir: str, checkpoint_dir: str, progress: str, steps: int = 400,
                 step_s: float = 0.5) -> str:
    """A batch script running ``sentinel.hooks.example_train`` on every task of the allocation (``sbatch -n2``);
    paths are quoted for the shell."""
    python, ack_dir, checkpoint_dir, progress = (shlex.quote(v) for v in (python, ack_dir, checkpoint_dir, progress))
    return f"""#!/bin/bash
export SENTINEL_ACK_DIR={ack_dir}
trap 'kill -USR1 "$step" 2>/dev/null' USR1
srun {python} -m sentinel.hooks.example_train --checkpoint-dir {checkpoint_dir} --steps {steps} \\
    --step-s {step_s} --progress {progress} &
step=$!
while :; do wait "$step"; rc=$?; kill -0 "$step" 2>/dev/null || break; done
exit $rc
"""
