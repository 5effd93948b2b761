"""The one way Sentinel runs Slurm's command-line tools: argv lists only (never a shell), the programs from
``actuator.slurm.bin_dir``, ``SLURM_CONF`` from ``actuator.slurm.slurm_conf``, a timeout on every call, through
the ``CommandRunner`` seam. The actuator's Slurm backend (scontrol, squeue, sinfo, scancel, with its own retries
while slurmctld is away), the load recorder (``squeue --json``) and the agent's slurm-jobs collector all go
through it, so one setting points all three at the same cluster.
"""

from __future__ import annotations

import os

from sentinel.config.actuation import SlurmActuatorConfig
from sentinel.errors import SentinelError
from sentinel.runner import CommandRunner, Completed, SubprocessRunner, output_of


class SlurmCli:
    def __init__(self, bin_dir: str = "", slurm_conf: str = "", timeout_s: float = 15.0,
                 runner: CommandRunner | None = None) -> None:
        self.bin_dir = bin_dir
        self.timeout_s = timeout_s
        self.runner = runner or SubprocessRunner({"SLURM_CONF": slurm_conf} if slurm_conf else None)

    @classmethod
    def from_config(cls, config: SlurmActuatorConfig, runner: CommandRunner | None = None) -> SlurmCli:
        return cls(config.bin_dir, config.slurm_conf, config.command_timeout_s, runner)

    def argv(self, *argv: str) -> list[str]:
        """``argv`` with the program found in ``bin_dir`` when one is configured."""
        return [os.path.join(self.bin_dir, argv[0]) if self.bin_dir else argv[0], *argv[1:]]

    def complete(self, *argv: str) -> Completed:
        """Run one command; every outcome (exit status, not found, timed out) comes back as a ``Completed``."""
        return self.runner.run(self.argv(*argv), self.timeout_s)

    def text(self, argv: list[str], error: type[Exception] = SentinelError) -> str:
        """The standard output of a command that succeeded; ``error`` naming the command otherwise."""
        return output_of(self.complete(*argv), error)
