"""The ``sentinel`` command line: a thin layer over the store, the config and the composition root.

Exit codes: 0 success; 1 an error (``error: ...`` on stderr; ``--debug`` shows the traceback); 2 bad usage;
3 the demo ran but did not meet its expectations.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from sentinel.cli.verbs import EXIT_ERROR, EXIT_OK
from sentinel.cli.verbs.actuate import cmd_resume
from sentinel.cli.verbs.actuation import cmd_keygen, cmd_requests
from sentinel.cli.verbs.advise import add_advise_verbs
from sentinel.cli.verbs.check import cmd_check
from sentinel.cli.verbs.demo import cmd_demo
from sentinel.cli.verbs.forecast import add_forecast_verbs
from sentinel.cli.verbs.incident import cmd_incident_show
from sentinel.cli.verbs.install import cmd_install
from sentinel.cli.verbs.models import cmd_model_list, cmd_model_show, cmd_train
from sentinel.cli.verbs.services import cmd_agent, cmd_collect, cmd_controller, cmd_detector, cmd_parse_log, cmd_run
from sentinel.cli.verbs.sim import cmd_sim_export, cmd_sim_plan
from sentinel.cli.verbs.store import (
    cmd_breaker,
    cmd_config_check,
    cmd_db_current,
    cmd_db_prune,
    cmd_db_upgrade,
    cmd_incidents,
    cmd_nodes,
    cmd_status,
)
from sentinel.errors import SentinelError


def common_options(top: bool) -> argparse.ArgumentParser:
    """Options accepted before or after the verb; after the verb they must not reset what was given before."""
    common = argparse.ArgumentParser(add_help=False)

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    common.add_argument(
        "--config", metavar="FILE", default=default(None), help="TOML config (default: $SENTINEL_CONFIG, else defaults)"
    )
    common.add_argument(
        "--db", metavar="URL|PATH", default=default(None), help="store URL or SQLite file; overrides store.url"
    )
    common.add_argument("--output", "-o", choices=("table", "json"), default=default("table"), help="output format")
    common.add_argument("--debug", action="store_true", default=default(False), help="show tracebacks and debug logs")
    return common


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sentinel-gpu")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    common = common_options(top=False)
    parser = argparse.ArgumentParser(
        prog="sentinel",
        parents=[common_options(top=True)],
        description="Sentinel: predict GPU node failures and move training jobs off failing nodes before they crash.",
        epilog="Start with `sentinel demo`. Each verb has its own --help.",
    )
    parser.add_argument("--version", action="version", version=f"sentinel {_version()}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(name: str, help_text: str, func: Any, **kw: Any) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, parents=[common], help=help_text, description=help_text, **kw)
        sub.set_defaults(func=func)
        return sub

    run = verb("run", "run agent, detector, controller and actuator in one process (embedded transport)", cmd_run)
    run.add_argument("--cycles", type=int, metavar="N", help="stop after N agent intervals (default: run until Ctrl-C)")

    agent = verb("agent", "run the node agent: collectors -> on-disk spool -> Kafka (transport.kind = kafka)",
                 cmd_agent)
    agent.add_argument("--cycles", type=int, metavar="N", help="stop after N samples (default: until Ctrl-C)")
    verb("detector", "run one detector group member (Kafka): telemetry and logs in, findings out", cmd_detector)
    verb("controller", "run the controller and the actuator (Kafka): findings -> decisions -> commands -> results",
         cmd_controller)
    check = verb("check", "check this node once (driver, GPU count, lost GPUs, memory errors, InfiniBand ports); "
                          "exit 0 healthy, 1 not: for Slurm's HealthCheckProgram and NHC", cmd_check)
    check.add_argument("--expect-gpus", type=int, metavar="N", help="GPUs this node must have (default "
                                                                    "check.expected_gpus; 0 = not checked)")
    check.add_argument("--expect-ib-ports", type=int, metavar="N", help="InfiniBand ports that must be ACTIVE "
                                                                        "(default check.expected_ib_ports)")
    check.add_argument("--resume", action="store_true", help="when healthy, return the node to service if Sentinel "
                       "drained it before its last boot and it is no lemon (default check.resume_own_drains)")
    collect = verb("collect", "read every configured collector once and print the snapshot (diagnostics)",
                   cmd_collect)
    collect.add_argument("--once", action="store_true", help="one snapshot (the only mode; kept for clarity)")
    parse_log = verb("parse-log", "print the kernel-log events Sentinel recognises in FILE (- for stdin)",
                     cmd_parse_log)
    parse_log.add_argument("file", metavar="FILE")

    demo = verb("demo", "run the real pipeline against a simulated cluster with injected faults", cmd_demo)
    demo.add_argument("--nodes", type=int, default=16, help="simulated nodes, 8 GPUs each (default 16, minimum 9)")
    demo.add_argument("--duration", default="1h", help="simulated time, e.g. 30m, 1h, 6h (default 1h)")
    demo.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    demo.add_argument(
        "--db-path",
        default="sentinel-demo.db",
        help="SQLite file for the demo's store, recreated each run (default sentinel-demo.db)",
    )
    demo.add_argument("--json", action="store_true", help="print the summary as one JSON object")

    config = verbs.add_parser("config", help="configuration tools").add_subparsers(dest="sub", required=True)
    check = config.add_parser("check", parents=[common], help="validate FILE and print the normalised config")
    check.add_argument("file", metavar="FILE")
    check.set_defaults(func=cmd_config_check)

    db = verbs.add_parser("db", help="store schema migrations").add_subparsers(dest="sub", required=True)
    db.add_parser("upgrade", parents=[common], help="migrate the store to the newest schema").set_defaults(
        func=cmd_db_upgrade
    )
    db.add_parser("current", parents=[common], help="show the store's schema revision").set_defaults(
        func=cmd_db_current
    )
    db.add_parser("prune", parents=[common], help="delete what store.retention lets go now (the controller "
                  "does it every store.retention.interval_s)").set_defaults(func=cmd_db_prune)

    verb("nodes", "list known nodes and their state", cmd_nodes)
    incidents = verb("incidents", "list the incidents that alerted an operator, newest first", cmd_incidents)
    incidents.add_argument("--all", action="store_true",
                           help="also incidents whose findings stayed evidence (graded into no alert)")
    incidents.add_argument("--node", help="only this node")
    incidents.add_argument("--since", metavar="DURATION", help="only incidents updated in the last DURATION (1h, 2d)")
    incidents.add_argument("--limit", type=int, default=200, help="at most this many (default 200)")
    incident = verbs.add_parser("incident", help="one incident in full").add_subparsers(dest="sub", required=True)
    show = incident.add_parser("show", parents=[common], help="an incident's findings with evidence, decisions with "
                                                             "guards and reasons, commands and action steps")
    show.add_argument("id", metavar="ID", help="an incident id (`sentinel incidents` lists them)")
    show.set_defaults(func=cmd_incident_show)
    verb("status", "summary of the store, policy mode and breaker", cmd_status)

    resume = verb("resume", "return a node Sentinel drained to service (Slurm; only nodes with our drain reason) "
                  "and resolve its incident", cmd_resume)
    resume.add_argument("node", metavar="NODE")

    breaker = verb("breaker", "show or reset the circuit breaker", cmd_breaker)
    breaker.add_argument("action", choices=("status", "reset"), nargs="?", default="status")
    requests = verb("requests", "the operator queue: GPU reset and reboot requests (never executed by Sentinel)",
                    cmd_requests)
    requests.add_argument("action", choices=("list", "ack"), nargs="?", default="list",
                          help="list the open requests (default), or ack one as done")
    requests.add_argument("id", nargs="?", metavar="ID", help="the request to acknowledge (its `id` column)")
    requests.add_argument("--all", action="store_true", help="also list acknowledged requests")
    requests.add_argument("--limit", type=int, default=200, help="at most this many, newest first (default 200)")
    install = verb("install", "lay out the systemd units, /etc/sentinel/{sentinel,agent}.toml and the command key "
                   "from this installation (configs and key are never overwritten)", cmd_install)
    install.add_argument("--prefix", default="/", help="root to install under (default /; a scratch folder to "
                                                       "look first)")
    install.add_argument("--dry-run", action="store_true", help="say what would be written, write nothing")
    keygen = verb("keygen", "write a new key file (mode 0600): service, fleet, or a node's telemetry key", cmd_keygen)
    keygen.add_argument("file", metavar="FILE", help="where to write the key; an existing file is never overwritten "
                        "(`-`: print it)")
    keygen.add_argument("--node", metavar="NAME", help="write NAME's telemetry key (agent.node_key_file), derived "
                        "from --fleet-key")
    keygen.add_argument("--fleet-key", metavar="FILE", help="the fleet key (security.fleet_key_file) to derive "
                        "--node's key from")

    add_advise_verbs(verbs, common)

    sim = verbs.add_parser("sim", help="simulator scenarios").add_subparsers(dest="sub", required=True)
    sim_plan = sim.add_parser("plan", parents=[common],
                              help="print a scenario's ground truth: every fault and benign event, drawn from its seed")
    sim_plan.add_argument("scenario", metavar="SCENARIO", help="a scenario file, a shipped name, or `list`")
    sim_plan.add_argument("--csv", metavar="FILE", help="also write the ground truth as CSV (training labels)")
    sim_plan.set_defaults(func=cmd_sim_plan)
    sim_export = sim.add_parser("export", parents=[common], help="write a scenario's ground truth and telemetry "
                                                                 "as a labelled training set")
    sim_export.add_argument("scenario", metavar="SCENARIO", help="a scenario file or a shipped name")
    sim_export.add_argument("--out", required=True, metavar="DIR", help="output folder")
    sim_export.add_argument("--max-steps", type=int, help="stop after this many steps (default: the whole run)")
    sim_export.set_defaults(func=cmd_sim_export)

    train = verb("train", "train the hazard model on labelled telemetry (simulator exports) and save it", cmd_train)
    train.add_argument("--data", action="append", metavar="DIR", help="a `sentinel sim export` folder (repeatable)")
    train.add_argument("--scenario", action="append", metavar="NAME",
                       help="simulate this scenario in memory and train on it (repeatable)")
    train.add_argument("--horizon", default="2h", help="predict failures within this horizon (default 2h)")
    train.add_argument("--target-precision", type=float, default=0.95,
                       help="choose the alerting threshold for this precision on held-out nodes (default 0.95)")
    train.add_argument("--recipe", choices=["shipped"],
                       help="train by the shipped model's recipe (fleets drawn from the train scenario; seeded)")
    train.add_argument("--ship", action="store_true",
                       help="with --recipe shipped in a source checkout: replace the packaged model and its pinned "
                            "SHA-256 (`make model`)")
    train.add_argument("--name", help="model name (default hazard-YYYYmmdd-HHMMSS)")
    train.add_argument("--models-dir", metavar="DIR", help="where models live (default detector.hazard.models_dir)")
    model = verbs.add_parser("model", help="trained models").add_subparsers(dest="sub", required=True)
    model_list = model.add_parser("list", parents=[common], help="list trained models, newest first")
    model_list.add_argument("--models-dir", metavar="DIR", help="default detector.hazard.models_dir")
    model_list.set_defaults(func=cmd_model_list)
    model_show = model.add_parser("show", parents=[common], help="a model's features, threshold, versions, training")
    model_show.add_argument("name", metavar="NAME", help="a model name, a model directory, or `latest`")
    model_show.add_argument("--models-dir", metavar="DIR", help="default detector.hazard.models_dir")
    model_show.set_defaults(func=cmd_model_show)
    add_forecast_verbs(verb)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen verb with the exit codes and error handling above (``sentinel-bench``
    shares it)."""
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.func(args))
    except SentinelError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `sentinel ... | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
