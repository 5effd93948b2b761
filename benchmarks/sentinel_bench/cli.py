"""``sentinel-bench``: the benchmarks, outside the operator's ``sentinel`` command (docs/benchmarks.md).

Same subcommands, flags and JSON as before (``sentinel-bench detect --scenario validate --json``); exit codes and
error handling are ``sentinel``'s (``sentinel.cli.main.run``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sentinel.cli.main import common_options, run
from sentinel.cli.verbs.advise import add_goodput_overrides
from sentinel_bench.server_verbs import add_server_bench_parsers
from sentinel_bench.verbs import (
    cmd_bench_actuate,
    cmd_bench_agent,
    cmd_bench_alerting,
    cmd_bench_calibration,
    cmd_bench_chaos,
    cmd_bench_codec,
    cmd_bench_detect,
    cmd_bench_forecast,
    cmd_bench_forecast_fleet,
    cmd_bench_forecast_jobs,
    cmd_bench_fuzz,
    cmd_bench_goodput,
    cmd_bench_pipeline,
    cmd_bench_sim,
    cmd_bench_soak,
)


def build_parser() -> argparse.ArgumentParser:
    common = common_options(top=False)
    parser = argparse.ArgumentParser(
        prog="sentinel-bench", parents=[common_options(top=True)],
        description="Sentinel's benchmarks: detection, goodput, pipeline, chaos, forecasting, actuation, ...",
        epilog="Numbers measured with each are in docs/benchmarks.md. Each subcommand has its own --help.")
    bench = parser.add_subparsers(dest="sub", metavar="BENCHMARK", required=True)
    codec = bench.add_parser("codec", parents=[common], help="wire codec speed: msgspec JSON vs alternatives")
    codec.add_argument("--messages", type=int, default=20_000, help="messages per codec (default 20000)")
    codec.add_argument("--json", action="store_true", help="print results as JSON")
    codec.set_defaults(func=cmd_bench_codec)
    fuzz = bench.add_parser("fuzz", parents=[common], help="every decoder of outside bytes fed mutated messages: "
                            "crashes (anything but a refusal with a reason) and peak memory")
    fuzz.add_argument("--messages", type=int, default=100_000, help="mutated messages (default 100000)")
    fuzz.add_argument("--seed", type=int, default=1, help="the mutations' random seed (default 1)")
    fuzz.add_argument("--json", action="store_true", help="print results as JSON")
    fuzz.set_defaults(func=cmd_bench_fuzz)
    agent_bench = bench.add_parser("agent", parents=[common], help="CPU cost of one agent sampling cycle")
    agent_bench.add_argument("--cycles", type=int, default=300, help="cycles to measure (default 300)")
    agent_bench.add_argument("--json", action="store_true", help="print results as JSON")
    agent_bench.set_defaults(func=cmd_bench_agent)
    pipe = bench.add_parser("pipeline", parents=[common], help="detector throughput vs bare Kafka consumption")
    pipe.add_argument("--broker", required=True, metavar="HOST:PORT", help="Kafka bootstrap (fresh topics are made)")
    pipe.add_argument("--messages", type=int, default=100_000, help="node-messages to produce (default 100000)")
    pipe.add_argument("--nodes", type=int, default=1000, help="distinct nodes (default 1000)")
    pipe.add_argument("--model", metavar="DIR", help="hazard model the detector loads (default: the model trained "
                      "on the shipped scenario, trained and cached on first use; `none`: rules only)")
    pipe.add_argument("--compression", choices=("zstd", "gzip", "lz4", "none"), default="zstd",
                      help="producer compression, as the agents' transport.kafka.compression (default zstd; lz4 "
                      "needs the lz4 package)")
    pipe.add_argument("--node-auth", choices=("on", "off"), default="on",
                      help="sign every message with its node's key and verify each in the detector, as a fleet "
                      "with security.fleet_key_file runs (default on)")
    pipe.add_argument("--json", action="store_true", help="print results as JSON")
    pipe.set_defaults(func=cmd_bench_pipeline)
    soak = bench.add_parser("soak", parents=[common], help="a long run of the detector and controller processes on "
                            "a simulated fleet: memory, lag, samples lost, faults found")
    soak.add_argument("--gpus", type=int, default=10_000, help="fleet size in GPUs, 8 per node (default 10000)")
    soak.add_argument("--duration", default="1h", help="how long, e.g. 10m, 1h (default 1h; real time)")
    soak.add_argument("--interval", type=float, default=1.0, help="seconds between a node's samples (default 1)")
    soak.add_argument("--store", metavar="URL", help="PostgreSQL URL (a fresh schema is made and dropped); "
                      "default: a SQLite file")
    soak.add_argument("--faults", type=int, help="fatal faults to inject (default one per 5 minutes, at least 3)")
    soak.add_argument("--seed", type=int, default=1)
    soak.add_argument("--json", action="store_true", help="print results as JSON")
    soak.set_defaults(func=cmd_bench_soak)
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
    bf = bench.add_parser("forecast", parents=[common], help="forecaster vs last-value and seasonal-naive "
                                                            "baselines on per-minute cluster load traces")
    bf.add_argument("--data", required=True, metavar="DIR",
                    help="folder with one CSV per virtual cluster (Helios format, e.g. helios/earth_vc_minute)")
    bf.add_argument("--train-days", type=float, default=21.0, help="train on the first N days (default 21)")
    bf.add_argument("--leave-one-out", action="store_true", help="score each cluster's quantiles with models "
                    "fitted on the other clusters only (a cluster the model has not seen)")
    bf.add_argument("--json", action="store_true", help="print results as JSON")
    bf.set_defaults(func=cmd_bench_forecast)
    fj = bench.add_parser("forecast-jobs", parents=[common], help="job-aware quantile forecasts of running and "
                          "pending GPUs replayed from a job trace, beside persistence and seasonal naive")
    fj.add_argument("--trace", required=True, metavar="FILE", help="CSV (optionally .gz), one row per job, times in "
                                                                   "seconds; an empty start: the job never ran")
    fj.add_argument("--submit-col", default="submit", help="column of the submit time (default submit)")
    fj.add_argument("--start-col", default="start", help="column of the start time (default start)")
    fj.add_argument("--end-col", default="end", help="column of the end time (default end)")
    fj.add_argument("--gpus-col", default="gpus", help="column of the GPU count (default gpus)")
    fj.add_argument("--limit-col", help="column of the time limit in seconds, if the trace has one")
    fj.add_argument("--train-days", type=float, default=21.0, help="train on the first N days of the busy part "
                                                                   "(default 21)")
    fj.add_argument("--capacity", type=float, help="GPUs of the cluster (default: the peak running in training)")
    fj.add_argument("--json", action="store_true", help="print results as JSON")
    fj.set_defaults(func=cmd_bench_forecast_jobs)
    ff = bench.add_parser("forecast-fleet", parents=[common], help="time `sentinel forecast` on a generated store "
                                                                   "of a large fleet")
    ff.add_argument("--nodes", type=int, default=10_000, help="nodes of 8 GPUs (default 10000)")
    ff.add_argument("--runs", type=int, default=3, help="timed runs (default 3)")
    ff.add_argument("--job-table", action="store_true", help="also fill a job table (the bins derived from it), "
                                                             "so each call takes its quantiles from it")
    ff.add_argument("--json", action="store_true", help="print results as JSON")
    ff.set_defaults(func=cmd_bench_forecast_fleet)
    about = ("time from fault onset to alert: Sentinel beside a real Prometheus scraping dcgm-exporter-style "
             "endpoints with static-threshold rules, on the same simulated faults and clock")
    p = bench.add_parser("alerting", parents=[common], help=about, description=about)
    p.add_argument("--per-class", type=int, default=3, help="faults per fault class, each on its own node (default 3)")
    p.add_argument("--classes", help="comma-separated fault classes (default: all: hbm, thermal, nvlink, pcie, "
                                     "infiniband, gsp, silent)")
    p.add_argument("--duration", default="40m", help="simulated time, e.g. 40m (default 40m)")
    p.add_argument("--step-wall", type=float, default=0.5, metavar="SECONDS",
                   help="wall seconds per 10 s simulated step, also Prometheus's scrape and rule interval "
                        "(default 0.5: 20x real time)")
    p.add_argument("--seed", type=int, default=11, help="random seed (default 11)")
    p.add_argument("--model", metavar="DIR", help="hazard model directory; `none` for rules only (default: the "
                                                  "model `bench detect` trains on the `train` scenario, cached)")
    p.add_argument("--background", choices=("on", "off"), default="on",
                   help="the healthy-fleet background under the faults (default on; off: a clean fleet)")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.set_defaults(func=cmd_bench_alerting)

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
    return run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
