"""``sentinel advise checkpoint`` and the goodput parameter flags ``bench goodput`` shares with it."""

from __future__ import annotations

import argparse
from typing import Any

from sentinel.capacity.goodput.params import Goodput
from sentinel.cli.verbs import EXIT_OK, open_repo, out

_HELP = {
    "checkpoint_interval_s": "common checkpoint interval compared across systems",
    "checkpoint_write_s": "blocking time of one checkpoint write",
    "restart_s": "reschedule + load + warm-up after a stop",
    "hang_detect_s": "until a crashed collective is noticed (NCCL timeout)",
    "spare_nodes": "spare nodes besides those left out of the job groups",
    "repair_s": "a failed node is back in the spare pool after this",
    "false_drain_return_s": "a healthy node drained by mistake is back after this",
    "slow_noticed_s": "a slow GPU is noticed without straggler detection after this",
    "alert_response_s": "an alert (straggler) leads to checkpoint + drain after this",
    "fail_slow_speed": "share of its speed a job keeps with a fail-slow GPU",
}


def add_goodput_overrides(parser: argparse.ArgumentParser) -> None:
    """One flag per ``[goodput]`` field (``--restart-s 300``); unset flags keep the scenario's value."""
    for name in Goodput.__struct_fields__:
        kind = int if name == "spare_nodes" else float
        parser.add_argument(f"--{name.replace('_', '-')}", dest=f"goodput_{name}", type=kind, metavar="N",
                            help=f"{_HELP.get(name, name)} (default: the scenario's [goodput] {name})")


def goodput_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, f"goodput_{name}") for name in Goodput.__struct_fields__}


def add_advise_verbs(verbs: Any, common: argparse.ArgumentParser) -> None:
    advise = verbs.add_parser("advise", help="recommendations from the store's history").add_subparsers(
        dest="sub", required=True)
    checkpoint = advise.add_parser(
        "checkpoint", parents=[common],
        help="a checkpoint interval (Young/Daly, availability-optimal) and the expected ETTR with and without "
             "proactive actions, from the interruptions in the store")
    defaults = Goodput()
    checkpoint.add_argument("--job-gpus", type=int, help="GPUs of the job (default: every GPU in the store)")
    checkpoint.add_argument("--gpus-per-node", type=int, help="default: the store's average, else 8")
    checkpoint.add_argument("--write-s", type=float, default=defaults.checkpoint_write_s,
                            help=f"blocking time of one checkpoint write (default {defaults.checkpoint_write_s:g})")
    checkpoint.add_argument("--restart-s", type=float, default=defaults.restart_s,
                            help=f"reschedule + load + warm-up (default {defaults.restart_s:g})")
    checkpoint.add_argument("--hang-s", type=float, default=defaults.hang_detect_s,
                            help=f"until a crashed job is noticed (default {defaults.hang_detect_s:g}, NCCL's timeout)")
    checkpoint.add_argument("--caught-ahead", type=float, metavar="SHARE",
                            help="share of interruptions caught ahead (default: measured in the store)")
    checkpoint.set_defaults(func=cmd_advise_checkpoint)


def cmd_advise_checkpoint(args: argparse.Namespace) -> int:
    from sentinel.capacity.goodput.advice import Inputs, advise
    from sentinel.errors import ValidationError

    for flag in ("write_s", "restart_s", "hang_s"):
        if getattr(args, flag) < 0:
            raise ValidationError(f"--{flag.replace('_', '-')}: must be >= 0")
    if args.caught_ahead is not None and not 0 <= args.caught_ahead <= 1:
        raise ValidationError("--caught-ahead: must be in [0, 1]")
    history = open_repo(args).interruption_history()
    per_node = args.gpus_per_node or (round(history["gpus"] / history["nodes"]) if history["nodes"] and
                                      history["gpus"] else 8)
    job_gpus = args.job_gpus or history["gpus"] or per_node
    if job_gpus < 1 or per_node < 1:
        raise ValidationError("--job-gpus and --gpus-per-node must be >= 1")
    a = advise(history, Inputs(job_gpus, per_node, args.write_s, args.restart_s, args.hang_s, args.caught_ahead))
    out(args, a, _table(a))
    return EXIT_OK


def _table(a: dict[str, Any]) -> str:
    def minutes(s: float) -> str:
        return f"{s / 60:.1f} min"

    return "\n".join([
        f"job: {a['job_gpus']} GPUs on {a['job_nodes']} nodes; "
        f"interruptions: {a['rate_per_1000_node_days']} per 1,000 node-days ({a['rate_source']}); "
        f"job MTBF {a['job_mtbf_s'] / 3600:.2f} h",
        f"caught ahead by Sentinel: {100 * a['caught_ahead_share']:.0f} % ({a['caught_ahead_source']})",
        f"Young {minutes(a['young_interval_s'])}, Daly {minutes(a['daly_interval_s'])}, "
        f"availability-optimal {minutes(a['availability_optimal_interval_s'])}",
        f"recommended: checkpoint every {minutes(a['recommended_interval_s'])}: expected ETTR "
        f"{100 * a['expected_ettr_reactive']:.2f} % without proactive actions",
        f"with Sentinel's proactive actions: every {minutes(a['recommended_interval_with_proactive_s'])}: expected "
        f"ETTR {100 * a['expected_ettr_with_proactive']:.2f} %",
    ])
