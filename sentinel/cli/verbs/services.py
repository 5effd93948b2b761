"""Verbs that run services or read collectors: run, agent, detector, controller, collect, parse-log."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator

from sentinel.cli.verbs import EXIT_ERROR, EXIT_OK, load_config
from sentinel.errors import ValidationError
from sentinel.tables import fmt_ts, render


def stop_on_signals() -> threading.Event:
    """An event that SIGINT and SIGTERM set: services stop at once (they wait on it, never sleep)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def cmd_run(args: argparse.Namespace) -> int:
    from sentinel import daemon

    cfg = load_config(args)
    stop = stop_on_signals()
    print(
        f"sentinel run: node {cfg.node_name()}, policy {cfg.policy.mode}, actuator {cfg.actuator.kind}, "
        f"store {_redacted(cfg.store.url)}; Ctrl-C to stop",
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

    cfg = load_config(args)
    daemon.validate(cfg)
    stop = stop_on_signals()
    print(f"sentinel agent: node {cfg.node_name()}, collectors {', '.join(cfg.agent.collectors)}, every "
          f"{cfg.agent.interval_s:g} s -> {cfg.transport.kind} {cfg.transport.kafka.bootstrap}; spool "
          f"{cfg.agent.spool_path}", file=sys.stderr)
    agent = daemon.run_agent(cfg, stop, max_cycles=args.cycles)
    print(f"stopped after {agent.seq} sample(s)", file=sys.stderr)
    return EXIT_OK


def _service(args: argparse.Namespace, name: str) -> int:
    from sentinel import daemon

    cfg = load_config(args)
    daemon.validate(cfg)
    stop = stop_on_signals()
    print(f"sentinel {name}: {cfg.transport.kind} {cfg.transport.kafka.bootstrap}, store {_redacted(cfg.store.url)}",
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
    from sentinel.obs.metrics import AgentMetrics

    cfg = load_config(args)
    daemon.validate(cfg)
    with tempfile.TemporaryDirectory() as scratch:
        # Read the kernel log from the agent's position without moving it: a copy of the position file, so
        # the agent still publishes every event shown here.
        position = cfg.agent.kmsg.state_path
        if position:
            copy = os.path.join(scratch, "kmsg.position")
            if os.path.exists(position):
                shutil.copyfile(position, copy)
            kmsg = msgspec.structs.replace(cfg.agent.kmsg, state_path=copy)
            cfg = msgspec.structs.replace(cfg, agent=msgspec.structs.replace(cfg.agent, kmsg=kmsg))
        agent = daemon.build_agent(cfg, SystemClock(), AgentMetrics(), sink=lambda items: None)
        sample, logs = agent.cycle()
    status = EXIT_ERROR if sample.collector_errors else EXIT_OK  # a failing collector fails the diagnostic
    if args.output == "json":
        print(json.dumps({"sample": msgspec.to_builtins(sample), "logs": msgspec.to_builtins(logs)}, indent=2))
        return status
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
        cpu = "-" if h.cpu_util_pct is None else f"{h.cpu_util_pct:.0f} %"  # unknown on the first cycle
        disk = "-" if h.disk_used_pct is None else f"{h.disk_used_pct:.0f} %"
        print(f"host: load {h.load1} {h.load5}, cpu {cpu}, mem available "
              f"{(h.mem_available_bytes or 0) / 2**30:.1f} GiB, disk {disk} used, boot {h.boot_id}")
    if logs:
        events = [{**msgspec.to_builtins(e), "when": fmt_ts(e.ts)} for e in logs]
        print(render(events, [("when", "seen (UTC)"), ("kind", "kind"), ("xid", "xid"), ("pci_bus_id", "pci"),
                              ("message", "message")], max_width=100))
    for name, error in sample.collector_errors.items():
        print(f"collector {name}: {error}")
    return status


def cmd_parse_log(args: argparse.Namespace) -> int:
    import msgspec

    from sentinel.clock import SystemClock
    from sentinel_collectors.kmsg import join_lines

    try:
        handle = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError as exc:
        raise ValidationError(f"{args.file}: {exc.strerror}") from None
    from sentinel.detector.xid import classify

    recognised = total = 0
    row = "{:>6}  {:<8} {:>5}  {:<8} {:<14} {:<36} {}"
    if args.output != "json":
        print(row.format("LINE", "KIND", "CODE", "SEVERITY", "PCI", "MEANING", "MESSAGE"))

    def lines() -> Iterator[str]:
        nonlocal total
        for line in handle:
            total += 1
            yield line.rstrip("\n")

    with handle:
        # A multi-line driver report is one event, as the agent reads it; "line" is its first line's number.
        for number, event in join_lines(lines(), "parsed", SystemClock().now()):
            recognised += 1
            data = msgspec.to_builtins(event)
            attrs = data.get("attrs", {})
            if event.xid is not None:
                info = classify(event.xid, event.message)
                severity, meaning = info.severity.value, info.meaning
            else:
                severity = attrs.get("severity", "").lower().replace("non-fatal", "nonfatal") or "-"
                meaning = attrs.get("event") or attrs.get("type") or ""
            code = data.get("xid") or attrs.get("sxid") or ""
            if args.output == "json":
                out = {"kind": data["kind"], "xid": data.get("xid"), "pci": data.get("pci_bus_id"), "attrs": attrs,
                       "severity": severity, "meaning": meaning, "message": data["message"], "line": number}
                print(json.dumps(out))
            else:
                print(row.format(number, data["kind"], code, severity, data.get("pci_bus_id") or "", meaning[:36],
                                 data["message"][:90]))
    print(f"{recognised} event(s) recognised in {total} line(s)", file=sys.stderr)
    return EXIT_OK


def _redacted(url: str) -> str:
    from sentinel.store.engine import redacted  # SQLAlchemy loads slowly: only when a service starts

    return redacted(url)
