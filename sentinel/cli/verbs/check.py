"""``sentinel check``: one health check of this node for Slurm's ``HealthCheckProgram`` and NHC (docs/operations.md).

Exit codes: 0 healthy; 1 a check failed (each failure printed as ``ERROR: <check>: <detail>``, NHC's style),
including "no NVIDIA driver" on a node that should have GPUs; 2 bad usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging

from sentinel.cli.verbs import EXIT_ERROR, EXIT_OK, load_config, out
from sentinel.config import Config
from sentinel.errors import ConfigError
from sentinel.tables import render


def cmd_check(args: argparse.Namespace) -> int:
    import pynvml

    from sentinel_collectors.check import judge, read_node

    logging.getLogger("sentinel_collectors.nvml").setLevel(logging.ERROR)  # the result says it once, in its table
    config = load_config(args)
    expected_gpus = config.check.expected_gpus if args.expect_gpus is None else args.expect_gpus
    expected_ib = config.check.expected_ib_ports if args.expect_ib_ports is None else args.expect_ib_ports
    gpus, driver_error, nics = read_node(pynvml, config.agent.nic.sysfs_root, read_nics=expected_ib > 0)
    checks = judge(gpus, driver_error, nics, expected_gpus, expected_ib)
    healthy = all(c.ok is not False for c in checks)
    rows = [{**dataclasses.asdict(c), "status": {True: "ok", False: "FAIL", None: "-"}[c.ok]} for c in checks]
    data = {"node": config.node_name(), "healthy": healthy, "checks": [dataclasses.asdict(c) for c in checks]}
    text = render(rows, [("name", "check"), ("status", "status"), ("detail", "detail")], max_width=90)
    text += "\n" + "\n".join(f"ERROR: {c.name}: {c.detail}" for c in checks if c.ok is False)
    from sentinel.cli.verbs.models import model_in_use

    model = model_in_use(args)
    data["hazard_model"] = model["model"]
    text = text.rstrip() + f"\nhazard model (detector.hazard.model): {model['model']}" + (
        f" ({model['verified']})" if model["verified"] not in (None, "ok") else "") + ("\nhealthy" if healthy else "")
    if args.resume or config.check.resume_own_drains:
        resume = _resume(config, config.node_name(), healthy)
        data["resume"] = resume
        text += f"\nresume: {'returned to service' if resume['resumed'] else 'no'} ({resume['why']})"
    out(args, data, text)
    return EXIT_OK if healthy else EXIT_ERROR


def _resume(config: Config, node: str, healthy: bool) -> dict[str, object]:
    from sentinel.actuator import Resumable
    from sentinel.actuator.autoresume import resume_own_drain
    from sentinel.clock import SystemClock
    from sentinel.daemon import build_scheduler
    from sentinel_collectors.check import boot_ts

    if not healthy:  # the scheduler is not even asked
        return {"resumed": False, "why": "its checks fail"}
    scheduler = build_scheduler(config, SystemClock())
    if not isinstance(scheduler, Resumable):
        raise ConfigError(f"actuator.kind: {config.actuator.kind!r} cannot resume nodes (slurm or kubernetes)")
    return resume_own_drain(scheduler, node, boot_ts())
