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

from sentinel.errors import SentinelError
from sentinel.verbs import EXIT_ERROR, EXIT_OK
from sentinel.verbs.actuate import cmd_bench_actuate, cmd_resume
from sentinel.verbs.actuation import cmd_keygen, cmd_requests
from sentinel.verbs.advise import add_advise_verbs, add_goodput_overrides
from sentinel.verbs.bench import (
    cmd_bench_agent,
    cmd_bench_calibration,
    cmd_bench_chaos,
    cmd_bench_codec,
    cmd_bench_detect,
    cmd_bench_goodput,
    cmd_bench_pipeline,
    cmd_bench_sim,
    cmd_demo,
)
from sentinel.verbs.forecast import add_forecast_verbs
from sentinel.verbs.models import cmd_model_list, cmd_model_show, cmd_train
from sentinel.verbs.ops import add_bench_alerting
from sentinel.verbs.server_bench import add_server_bench_parsers
from sentinel.verbs.services import cmd_agent, cmd_collect, cmd_controller, cmd_detector, cmd_parse_log, cmd_run
from sentinel.verbs.sim import cmd_sim_export, cmd_sim_plan
from sentinel.verbs.store import (
    cmd_breaker,
    cmd_config_check,
    cmd_db_current,
    cmd_db_upgrade,
    cmd_incidents,
    cmd_nodes,
    cmd_status,
)


def _common(top: bool) -> argparse.ArgumentParser:
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


def build_parser() -> argparse.ArgumentParser:
    common = _common(top=False)
    parser = argparse.ArgumentParser(
        prog="sentinel",
        parents=[_common(top=True)],
        description="Sentinel: predict GPU node failures and move training jobs off failing nodes before they crash.",
        epilog="Start with `sentinel demo`. Each verb has its own --help.",
    )
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

    verb("nodes", "list known nodes and their state", cmd_nodes)
    incidents = verb("incidents", "list incidents, newest first", cmd_incidents)
    incidents.add_argument("--node", help="only this node")
    incidents.add_argument("--since", metavar="DURATION", help="only incidents updated in the last DURATION (1h, 2d)")
    incidents.add_argument("--limit", type=int, default=200, help="at most this many (default 200)")
    verb("status", "summary of the store, policy mode and breaker", cmd_status)

    resume = verb("resume", "return a node Sentinel drained to service (Slurm; only nodes with our drain reason) "
                  "and resolve its incident", cmd_resume)
    resume.add_argument("node", metavar="NODE")

    breaker = verb("breaker", "show or reset the circuit breaker", cmd_breaker)
    breaker.add_argument("action", choices=("status", "reset"), nargs="?", default="status")
    requests = verb("requests", "the operator queue: GPU reset and reboot requests (never executed by Sentinel)",
                    cmd_requests)
    requests.add_argument("--limit", type=int, default=200, help="at most this many, newest first (default 200)")
    keygen = verb("keygen", "write a new command-signing key file (mode 0600) for security.key_file", cmd_keygen)
    keygen.add_argument("file", metavar="FILE", help="where to write the key; an existing file is never overwritten")

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

    bench = verbs.add_parser("bench", help="benchmarks").add_subparsers(dest="sub", required=True)
    codec = bench.add_parser("codec", parents=[common], help="wire codec speed: msgspec JSON vs alternatives")
    codec.add_argument("--messages", type=int, default=20_000, help="messages per codec (default 20000)")
    codec.add_argument("--json", action="store_true", help="print results as JSON")
    codec.set_defaults(func=cmd_bench_codec)
    agent_bench = bench.add_parser("agent", parents=[common], help="CPU cost of one agent sampling cycle")
    agent_bench.add_argument("--cycles", type=int, default=300, help="cycles to measure (default 300)")
    agent_bench.add_argument("--json", action="store_true", help="print results as JSON")
    agent_bench.set_defaults(func=cmd_bench_agent)
    pipe = bench.add_parser("pipeline", parents=[common], help="detector throughput vs bare Kafka consumption")
    pipe.add_argument("--broker", required=True, metavar="HOST:PORT", help="Kafka bootstrap (fresh topics are made)")
    pipe.add_argument("--messages", type=int, default=100_000, help="node-messages to produce (default 100000)")
    pipe.add_argument("--nodes", type=int, default=1000, help="distinct nodes (default 1000)")
    pipe.add_argument("--json", action="store_true", help="print results as JSON")
    pipe.set_defaults(func=cmd_bench_pipeline)
    sim_bench = bench.add_parser("sim", parents=[common], help="simulator generation speed")
    sim_bench.add_argument("--scenario", default="llama3-mix", help="scenario name or file (default llama3-mix)")
    sim_bench.add_argument("--steps", type=int, default=360, help="steps to generate (default 360)")
    sim_bench.add_argument("--background", choices=("on", "off"), default="on",
                           help="off: generate the clean fleet (default on)")
    sim_bench.add_argument("--json", action="store_true", help="print results as JSON")
    sim_bench.set_defaults(func=cmd_bench_sim)
    detect = bench.add_parser("detect", parents=[common], help="score detection on a scenario against its ground "
                                                               "truth, beside static thresholds and react-on-crash")
    detect.add_argument("--scenario", required=True, help="scenario name or file")
    detect.add_argument("--healthy-sample", type=float, default=1.0,
                        help="share of nodes without any ground-truth event to feed (default 1: all)")
    detect.add_argument("--max-steps", type=int, help="stop after this many steps (default: the whole scenario)")
    detect.add_argument("--max-fraction", type=float, default=0.1,
                        help="circuit breaker: share of the fleet drained per hour (default 0.1, the product default)")
    detect.add_argument("--event-windows", action="store_true",
                        help="feed nodes with a ground-truth event only around it (2 h before its precursor to 5 min "
                             "after failure): for fleets of thousands of nodes over weeks")
    detect.add_argument("--model", metavar="DIR",
                        help="hazard model directory; `none` for rules only (default: the model trained on the "
                             "shipped `train` scenario, trained on first use and cached)")
    detect.add_argument("--background", choices=("on", "off"), default="on",
                        help="`off` scores the scenario on a clean fleet (its [background] switched off), to compare "
                             "with the realistic one (default on: as the scenario file says)")
    detect.add_argument("--json", action="store_true", help="print results as JSON")
    detect.set_defaults(func=cmd_bench_detect)
    goodput = bench.add_parser("goodput", parents=[common],
                               help="ETTR of each system (reactive, static thresholds, Sentinel, oracle) on a "
                                    "scenario's failures, with the checkpoint interval that maximises it")
    goodput.add_argument("--scenario", required=True, help="scenario name or file (e.g. llama3-54d)")
    goodput.add_argument("--healthy-nodes", type=int, default=16,
                         help="event-free nodes fed the whole run; their false drains are scaled to the rest "
                              "(default 16)")
    goodput.add_argument("--max-steps", type=int, help="stop after this many steps (default: the whole scenario)")
    goodput.add_argument("--model", metavar="DIR", help="hazard model directory; `none` for rules only (default: "
                                                         "the cached model trained on `train`)")
    goodput.add_argument("--background", choices=("on", "off"), default="on",
                         help="`off`: the scenario on a clean fleet (default on)")
    goodput.add_argument("--workers", type=int, help="processes for the detection replay, each replaying a "
                                                     "consecutive part of the run (default: CPUs, at most 4)")
    add_goodput_overrides(goodput)
    goodput.add_argument("--json", action="store_true", help="print results as JSON")
    goodput.set_defaults(func=cmd_bench_goodput)
    chaos = bench.add_parser("chaos", parents=[common], help="effects exactly once while processes are killed and the "
                                                              "broker and slurmctld restart (real services)")
    chaos.add_argument("--slurm-dir", metavar="DIR", help="a Slurm test cluster started by tests/slurm.sh (default: "
                                                          "$SENTINEL_TEST_SLURM); every job in it is cancelled")
    chaos.add_argument("--store", metavar="URL", help="PostgreSQL server URL (a fresh database is made and dropped) "
                                                      "or sqlite (a fresh file); default $SENTINEL_TEST_PG_URL")
    chaos.add_argument("--duration", type=float, default=300.0, help="seconds of chaos (default 300)")
    chaos.add_argument("--kills", type=int, default=24, help="kill -9 of a detector or controller (default 24)")
    chaos.add_argument("--broker-restarts", type=int, default=3, help="broker restarts (default 3)")
    chaos.add_argument("--slurmctld-restarts", type=int, default=2, help="slurmctld restarts (default 2)")
    chaos.add_argument("--seed", type=int, default=1, help="seed of the plan (default 1)")
    chaos.add_argument("--json", action="store_true", help="print results as JSON")
    chaos.set_defaults(func=cmd_bench_chaos)
    calibration = bench.add_parser("calibration", parents=[common],
                                   help="reliability of the hazard model's probability on a scenario unlike training")
    calibration.add_argument("--scenario", action="append", required=True,
                             help="scenario name or file (repeat for several curves in one plot)")
    calibration.add_argument("--model", metavar="DIR", help="hazard model directory (default: the cached model)")
    calibration.add_argument("--background", choices=("on", "off"), default="on",
                             help="`off`: the scenario on a clean fleet (default on)")
    calibration.add_argument("--max-steps", type=int, help="stop after this many steps (default: the whole run)")
    calibration.add_argument("--plot", metavar="PNG", help="write the reliability curves to this PNG (needs the "
                                                           "plot extra)")
    calibration.add_argument("--json", action="store_true", help="print results as JSON")
    calibration.set_defaults(func=cmd_bench_calibration)
    add_server_bench_parsers(bench, common)
    add_forecast_verbs(verb, bench, common)
    add_bench_alerting(bench, common)
    actuate = bench.add_parser("actuate", parents=[common], help="decision -> drain, checkpoint -> ack and requeue -> "
                                                                 "running on a running Slurm cluster (SLURM_CONF)")
    actuate.add_argument("--slurm-conf", metavar="FILE", help="the cluster's slurm.conf (default: $SLURM_CONF)")
    actuate.add_argument("--drains", type=int, default=30, help="decision -> drain samples (default 30)")
    actuate.add_argument("--checkpoints", type=int, default=5, help="checkpoint handshakes (default 5)")
    actuate.add_argument("--requeues", type=int, default=3, help="requeues of the job (default 3)")
    actuate.add_argument("--workdir", metavar="DIR", help="folder shared with the nodes for the job's checkpoints "
                                                          "and acknowledgements (default: a new temporary folder)")
    actuate.add_argument("--json", action="store_true", help="print results as JSON")
    actuate.set_defaults(func=cmd_bench_actuate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
