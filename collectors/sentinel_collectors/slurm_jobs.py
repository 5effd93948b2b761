"""Which Slurm jobs run on this node: ``squeue --noheader --format=%A --states=RUNNING --nodelist=NODE``.

Nodes that run the same job are peers (the detector compares them with each other). The call goes through an
argv list (no shell), with the node name validated first; its default interval is 30 s, not the agent's, since
every call is a round trip to slurmctld.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sentinel.errors import CollectorError
from sentinel.events import NODE_NAME_PATTERN
from sentinel.slurm_cli import SlurmCli

DEFAULT_INTERVAL_S = 30.0
Runner = Callable[[list[str]], str]
_JOB_ID = re.compile(r"^[0-9]+(?:_[0-9]+)?(?:\+[0-9]+)?$")  # 123, array 123_4, het 123+1


def run_command(argv: list[str]) -> str:
    return SlurmCli(timeout_s=10.0).text(argv, CollectorError)


class SlurmJobs:
    def __init__(self, node: str, squeue: str = "squeue", runner: Runner = run_command) -> None:
        if not re.match(NODE_NAME_PATTERN, node):
            raise CollectorError(f"node name {node!r} is not a valid node name")
        self.argv = [squeue, "--noheader", "--format=%A", "--states=RUNNING", f"--nodelist={node}"]
        self.runner = runner

    def read(self) -> list[str]:
        """Job ids running here, sorted; lines that are not job ids are an error, not silently dropped."""
        jobs = []
        for line in self.runner(self.argv).splitlines():
            line = line.strip()
            if not line:
                continue
            if not _JOB_ID.match(line):
                raise CollectorError(f"squeue printed {line[:80]!r} where a job id was expected")
            jobs.append(line)
        return sorted(set(jobs))
