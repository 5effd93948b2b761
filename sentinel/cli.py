"""The ``sentinel`` command line: a thin layer over the store, the config and the composition root.

Exit codes: 0 success; 1 an error (``error: ...`` on stderr; ``--debug`` shows the traceback); 2 bad usage;
3 the demo ran but did not meet its expectations.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

from sentinel import config as config_mod
from sentinel.errors import SentinelError, ValidationError
from sentinel.events import NODE_NAME_PATTERN
from sentinel.tables import fmt_ts, parse_duration, render

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_EXPECTATION = 0, 1, 2, 3


def _out(args: argparse.Namespace, data: Any, table: str) -> None:
    if args.output == "json":
        print(json.dumps(data, indent=2, default=str))
    else:
        print(table)


def _load_config(args: argparse.Namespace) -> config_mod.Config:
    path = args.config or os.environ.get("SENTINEL_CONFIG")
    environ = dict(os.environ)
    if args.db:
        environ["SENTINEL__STORE__URL"] = json.dumps(_db_url(args.db))
    return config_mod.load(path, environ)


def _db_url(value: str) -> str:
    return value if "://" in value else f"sqlite:///{value}"


def _repo(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from sentinel.daemon import open_repository

    return open_repository(_load_config(args), migrate=False)


# ----- verbs ----------------------------------------------------------------------------------------------------
def cmd_config_check(args: argparse.Namespace) -> int:
    from sentinel.daemon import validate

    cfg = config_mod.load(args.file, os.environ)
    validate(cfg)
    data = config_mod.to_toml_dict(cfg)
    if args.output == "json":
        print(json.dumps(data, indent=2))
    else:
        print(f"# {args.file}: valid. Normalised configuration with defaults:")
        print(_toml(data))
    return EXIT_OK


def _toml(data: dict[str, Any], prefix: str = "") -> str:
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    lines = [f"[{prefix}]"] if prefix and scalars else []
    lines += [f"{k} = {json.dumps(v)}" for k, v in scalars.items()]
    for key, value in tables.items():
        lines.append("")
        lines.append(_toml(value, f"{prefix}.{key}" if prefix else key))
    return "\n".join(lines).strip("\n")


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from sentinel.store import engine as store_engine

    cfg = _load_config(args)
    engine = store_engine.make_engine(cfg.store.url)
    store_engine.upgrade(engine)
    print(
        f"store {engine.url.render_as_string(hide_password=True)} is at revision "
        f"{store_engine.current_revision(engine)} (head)"
    )
    return EXIT_OK


def cmd_db_current(args: argparse.Namespace) -> int:
    from sentinel.store import engine as store_engine

    cfg = _load_config(args)
    engine = store_engine.make_engine(cfg.store.url)
    current, head = store_engine.current_revision(engine), store_engine.head_revision()
    data = {
        "url": engine.url.render_as_string(hide_password=True),
        "current": current,
        "head": head,
        "up_to_date": current == head,
    }
    _out(args, data, f"current: {current or 'none (run `sentinel db upgrade`)'}\nhead:    {head}")
    return EXIT_OK if current == head else EXIT_ERROR


def cmd_nodes(args: argparse.Namespace) -> int:
    rows = _repo(args).nodes()
    for row in rows:
        row["state"] = "drained" if row["drained_incident_id"] else ("at risk" if row["open_incidents"] else "ok")
        row["last_seen"] = fmt_ts(row["last_seen_ts"])
    columns = [
        ("name", "node"),
        ("state", "state"),
        ("gpu_count", "gpus"),
        ("open_incidents", "open incidents"),
        ("drained_incident_id", "drained by"),
        ("last_seen", "last seen (UTC)"),
    ]
    _out(args, rows, render(rows, columns) if rows else "no nodes recorded yet")
    return EXIT_OK


def cmd_incidents(args: argparse.Namespace) -> int:
    if args.node and not re.match(NODE_NAME_PATTERN, args.node):
        raise ValidationError(f"--node: not a valid node name: {args.node!r}")
    since_ts = time.time() - parse_duration(args.since) if args.since else None
    rows = _repo(args).incidents(node=args.node, since_ts=since_ts, limit=args.limit)
    for row in rows:
        row["opened"] = fmt_ts(row["opened_ts"])
    columns = [
        ("id", "incident"),
        ("node", "node"),
        ("status", "status"),
        ("severity", "severity"),
        ("kind", "kind"),
        ("findings", "findings"),
        ("decision", "action"),
        ("opened", "opened (UTC)"),
        ("summary", "summary"),
    ]
    _out(args, rows, render(rows, columns, max_width=70) if rows else "no incidents")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    repo = _repo(args)
    counts = repo.counts()
    breaker = repo.load_breaker()
    cfg = _load_config(args)
    data = {
        "store": repo.engine.url.render_as_string(hide_password=True),
        "policy_mode": cfg.policy.mode,
        "actuator": cfg.actuator.kind,
        "breaker_open": bool(breaker and breaker.is_open),
        "breaker_reason": breaker.reason if breaker else "",
        **counts,
    }
    lines = [f"{k.replace('_', ' '):<16} {v}" for k, v in data.items()]
    _out(args, data, "\n".join(lines))
    return EXIT_OK


def cmd_breaker(args: argparse.Namespace) -> int:
    from sentinel.metrics import Metrics
    from sentinel.policy.breaker import Breaker

    repo = _repo(args)
    breaker = Breaker(repo, _load_config(args).policy.breaker, Metrics())
    state = breaker.reset(time.time()) if args.action == "reset" else breaker.state()
    data = {
        "open": state.is_open,
        "reason": state.reason,
        "changed": fmt_ts(state.changed_ts or None),
        "nodes_in_window": len({n for _, n in state.recent}),
    }
    verb = "reset: breaker closed" if args.action == "reset" else ("OPEN" if state.is_open else "closed")
    _out(args, data, f"breaker {verb}" + (f" ({state.reason})" if state.reason else ""))
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from sentinel import daemon

    cfg = _load_config(args)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(
        f"sentinel run: node {cfg.node_name()}, policy {cfg.policy.mode}, actuator {cfg.actuator.kind}, "
        f"store {cfg.store.url}; Ctrl-C to stop",
        file=sys.stderr,
    )
    pipeline = daemon.run(cfg, stop, max_cycles=args.cycles)
    counts = pipeline.repo.counts()
    print(
        f"stopped: {counts['nodes']} node(s), {counts['findings']} finding(s), {counts['incidents']} incident(s)",
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_agent(args: argparse.Namespace) -> int:
    from sentinel import daemon

    cfg = _load_config(args)
    daemon.validate(cfg)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"sentinel agent: node {cfg.node_name()}, collectors {', '.join(cfg.agent.collectors)}, every "
          f"{cfg.agent.interval_s:g} s -> {cfg.transport.kind} {cfg.transport.kafka.bootstrap}; spool "
          f"{cfg.agent.spool_path}", file=sys.stderr)
    agent = daemon.run_agent(cfg, stop, max_cycles=args.cycles)
    print(f"stopped after {agent.seq} sample(s)", file=sys.stderr)
    return EXIT_OK


def _service(args: argparse.Namespace, name: str) -> int:
    from sentinel import daemon

    cfg = _load_config(args)
    daemon.validate(cfg)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"sentinel {name}: {cfg.transport.kind} {cfg.transport.kafka.bootstrap}, store {cfg.store.url}",
          file=sys.stderr)
    if name == "detector":
        daemon.run_detector(cfg, stop)
    else:
        daemon.run_controller(cfg, stop)
    return EXIT_OK


def cmd_detector(args: argparse.Namespace) -> int:
    return _service(args, "detector")


def cmd_controller(args: argparse.Namespace) -> int:
    return _service(args, "controller")


def cmd_collect(args: argparse.Namespace) -> int:
    import msgspec

    from sentinel import daemon
    from sentinel.clock import SystemClock
    from sentinel.metrics import Metrics

    cfg = _load_config(args)
    daemon.validate(cfg)
    agent = daemon.build_agent(cfg, SystemClock(), Metrics(), sink=lambda items: None)
    sample, logs = agent.cycle()
    if args.output == "json":
        print(json.dumps({"sample": msgspec.to_builtins(sample), "logs": msgspec.to_builtins(logs)}, indent=2))
        return EXIT_OK
    print(f"node {sample.node} at {fmt_ts(sample.ts)} UTC: {len(sample.gpus)} GPU(s), {len(sample.nics)} NIC(s), "
          f"{len(logs)} log event(s)")
    if sample.gpus:
        gpus = [msgspec.to_builtins(g) for g in sample.gpus]
        print(render(gpus, [("index", "gpu"), ("state", "state"), ("temp_c", "temp C"), ("power_w", "power W"),
                            ("util_gpu_pct", "util %"), ("ecc_dbe_volatile", "dbe"), ("pcie_replay", "pcie replay"),
                            ("uuid", "uuid")]))
    if sample.nics:
        nics = [{**msgspec.to_builtins(n), "counters": len(n.counters)} for n in sample.nics]
        print(render(nics, [("name", "nic"), ("link_layer", "link"), ("state", "state"), ("carrier", "carrier"),
                            ("speed_mbps", "speed Mb/s"), ("counters", "counters")]))
    if sample.host:
        h = sample.host
        print(f"host: load {h.load1} {h.load5}, cpu {h.cpu_util_pct} %, mem available "
              f"{(h.mem_available_bytes or 0) / 2**30:.1f} GiB, disk {h.disk_used_pct} % used, boot {h.boot_id}")
    for name, error in sample.collector_errors.items():
        print(f"collector {name}: {error}")
    return EXIT_OK


def cmd_parse_log(args: argparse.Namespace) -> int:
    import msgspec

    from collectors.kmsg import parse_line

    try:
        handle = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError as exc:
        raise ValidationError(f"{args.file}: {exc.strerror}") from None
    recognised = total = 0
    with handle:
        for line in handle:
            total += 1
            event = parse_line(line.rstrip("\n"), "parsed", time.time())
            if event is None:
                continue
            recognised += 1
            data = msgspec.to_builtins(event)
            if args.output == "json":
                out = {"kind": data["kind"], "xid": data.get("xid"), "pci": data.get("pci_bus_id"),
                       "attrs": data.get("attrs", {}), "message": data["message"], "line": total}
                print(json.dumps(out))
            else:
                print(f"{total:>6}  {data['kind']:<8} {data.get('xid') or '':>4} {data.get('pci_bus_id') or '':<14} "
                      f"{data['message'][:90]}")
    print(f"{recognised} of {total} line(s) recognised", file=sys.stderr)
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from sentinel.demo import DemoOptions, run_demo
    from sentinel.demo_view import expectations_met, render_demo

    options = DemoOptions(
        nodes=args.nodes, duration_s=parse_duration(args.duration), seed=args.seed, db_path=args.db_path
    )

    def progress(fraction: float) -> None:
        if not args.json and sys.stderr.isatty():
            print(
                f"\rsimulating {options.nodes} nodes x {options.gpus} GPUs: {fraction:4.0%}",
                end="",
                file=sys.stderr,
                flush=True,
            )

    report = run_demo(options, progress)
    if not args.json and sys.stderr.isatty():
        print(file=sys.stderr)
    print(json.dumps(report.summary, indent=2) if args.json else render_demo(report))
    problems = expectations_met(report.summary)
    for problem in problems:
        print(f"demo: expectation not met: {problem}", file=sys.stderr)
    return EXIT_EXPECTATION if problems else EXIT_OK


def cmd_bench_agent(args: argparse.Namespace) -> int:
    from sentinel.bench.agent import render_agent, run_agent_bench

    result = run_agent_bench(args.cycles)
    print(json.dumps(result, indent=2) if args.json else render_agent(result))
    return EXIT_OK


def cmd_bench_pipeline(args: argparse.Namespace) -> int:
    from sentinel.bench.pipeline import render_pipeline, run_pipeline_bench

    result = run_pipeline_bench(args.broker, args.messages, args.nodes,
                                progress=lambda text: print(f"bench: {text}", file=sys.stderr, flush=True))
    print(json.dumps(result, indent=2) if args.json else render_pipeline(result))
    return EXIT_OK


def cmd_bench_codec(args: argparse.Namespace) -> int:
    from sentinel.bench.codec import render_codec, run_codec_bench

    result = run_codec_bench(args.messages)
    print(json.dumps(result, indent=2) if args.json else render_codec(result))
    return EXIT_OK


# ----- parser ---------------------------------------------------------------------------------------------------
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

    breaker = verb("breaker", "show or reset the circuit breaker", cmd_breaker)
    breaker.add_argument("action", choices=("status", "reset"), nargs="?", default="status")

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
