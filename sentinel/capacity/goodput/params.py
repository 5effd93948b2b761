"""The ``[goodput]`` section of a scenario: what an interruption costs the scenario's training jobs.

Every default has its source here and in docs/benchmarks.md ("assumption" where nothing public gives the number);
``sentinel-bench goodput`` overrides each one from the command line (``--checkpoint-write-s 10``).
"""

from __future__ import annotations

import math

import msgspec

from sentinel.config import explain, require
from sentinel.errors import ConfigError


class Goodput(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    # The common interval all systems are compared at; each system's best interval is searched as well.
    # Assumption: 30 min, the order of Young's interval for a 405B job at Llama 3's failure rate.
    checkpoint_interval_s: float = 1800.0
    # Blocking part of one checkpoint write. Between PyTorch async DCP's stall (6.3 s for a 7B model) and its
    # synchronous save (148.8 s) (domain.md); a sharded 405B checkpoint written asynchronously: assumption.
    checkpoint_write_s: float = 30.0
    # Reschedule + load the checkpoint + warm up after any stop. Assumption: 10 min, in line with Kokolis et
    # al.'s restart overheads for large jobs and Megatron's later heartbeat timeout (300 s) plus load time.
    restart_s: float = 600.0
    # How long a crashed collective hangs before anyone notices: PyTorch's NCCL process group timeout (10 min).
    hang_detect_s: float = 600.0
    # Spare nodes besides the nodes left out of the scenario's job groups (never fail: not simulated).
    spare_nodes: int = 0
    # A failed node (or one drained ahead of its fault) is back in the spare pool after this. Assumption: 2 days.
    repair_s: float = 172_800.0
    # A healthy node drained by mistake is checked and back after this. Assumption: 4 h (an operator's triage).
    false_drain_return_s: float = 14_400.0
    # Without straggler detection, a slow GPU is noticed after this (step-time dashboards). Assumption: 2 h.
    slow_noticed_s: float = 7_200.0
    # An alert a person acts on (a straggler finding) leads to checkpoint + drain after this. Assumption: 15 min.
    alert_response_s: float = 900.0
    # The share of its speed a job keeps while one GPU is fail-slow: the simulator's slow GPU runs at 60 % clock
    # and a synchronous job waits for its slowest rank.
    fail_slow_speed: float = 0.6

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            require(math.isfinite(value) and value >= 0, name, "must be a finite number >= 0", value)
        require(self.checkpoint_interval_s > 0, "checkpoint_interval_s", "must be > 0", self.checkpoint_interval_s)
        require(0 < self.fail_slow_speed <= 1, "fail_slow_speed", "must be in (0, 1]", self.fail_slow_speed)

    def with_overrides(self, values: dict[str, float | int | None]) -> Goodput:
        """This section with the given fields replaced (None leaves a field as it is); validated again."""
        changed = {k: v for k, v in values.items() if v is not None}
        try:
            return msgspec.convert(msgspec.to_builtins(self) | changed, Goodput) if changed else self
        except msgspec.ValidationError as exc:
            raise ConfigError("goodput." + explain(str(exc))) from None
