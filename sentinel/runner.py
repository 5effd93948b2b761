"""The CommandRunner seam: one external program, argv list only, never a shell, always with a timeout.

Scheduler backends that drive command-line tools (Slurm's scontrol, squeue, scancel) take a ``CommandRunner``;
production uses ``SubprocessRunner``. A program that cannot be started or that outlives its timeout comes back
as a ``Completed`` with ``returncode`` 127 or 124 and the reason in ``stderr``, like the shell would report
it, so callers handle every outcome in one place.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

TIMED_OUT, NOT_FOUND = 124, 127


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float


class CommandRunner(Protocol):
    def run(self, argv: Sequence[str], timeout_s: float) -> Completed:
        """Run ``argv`` (no shell) and wait at most ``timeout_s``."""
        ...


class SubprocessRunner:
    """``subprocess.run`` with an argv list, a timeout and extra environment (``SLURM_CONF``, say)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = {**os.environ, **env} if env else None

    def run(self, argv: Sequence[str], timeout_s: float) -> Completed:
        args = tuple(argv)
        started = time.monotonic()
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, env=self.env,
                                  check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Completed(args, TIMED_OUT, "", f"{args[0]}: no answer within {timeout_s:g} s",
                             time.monotonic() - started)
        except OSError as exc:
            return Completed(args, NOT_FOUND, "", f"{args[0]}: cannot run: {exc.strerror}", time.monotonic() - started)
        elapsed = time.monotonic() - started
        log.debug("%s -> %d in %.3f s", " ".join(args), proc.returncode, elapsed)
        return Completed(args, proc.returncode, proc.stdout, proc.stderr, elapsed)


def output_of(completed: Completed, error: type[Exception]) -> str:
    """``stdout`` of a run that succeeded; otherwise ``error`` naming the program, its status and stderr."""
    if completed.returncode != 0:
        raise error(f"{' '.join(completed.argv)} exited {completed.returncode}: {completed.stderr.strip()[:300]}")
    return completed.stdout
