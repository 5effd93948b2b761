"""``sentinel-bench fuzz``: every decoder that reads bytes from outside, fed mutated messages (issue 38, item 5).

A decoder may refuse a message (any ``SentinelError``: ``CodecError``, a refused seal or command, a collector or
scheduler error, each with a reason); anything else it raises is a crash, counted with the decoder, the exception
and the first bytes of the message. Each message goes to every decoder, so each must survive whatever another
one's input looks like.

Mutations, chosen by a seeded generator from valid seeds (a telemetry sample of 8 GPUs, a log event, a sealed
finding and result, a signed command, a dead letter, kernel-log lines, a dcgm-exporter scrape, squeue/sinfo
JSON): structure-aware ones on the parsed JSON (a value replaced by a wrong type, a huge or negative number, NaN,
a long string; a key dropped or an unknown one added; a list grown to thousands of copies; deep nesting) and
byte-level ones (flips, truncation, insertion, splices between seeds). ``max_rss_mib`` is the process's peak
resident memory: bounded if the decoders hold nothing of what they refused.
"""

from __future__ import annotations

import json
import random
import resource
import time
from collections.abc import Callable
from typing import Any

from sentinel import codec
from sentinel.actuator.sealed import Opener, Sealer
from sentinel.actuator.signing import CommandSigner, CommandVerifier, MemoryNonces, SigningKey
from sentinel.actuator.slurm_state import parse_jobs, parse_nodes
from sentinel.clock import ManualClock
from sentinel.config.detector import LimitsConfig
from sentinel.detector.sample_view import decode_view
from sentinel.detector.shapes import check_shape
from sentinel.errors import SentinelError
from sentinel.events import (
    ActionKind,
    ActionResult,
    Command,
    DeadLetter,
    Finding,
    FindingClass,
    GpuReading,
    HostReading,
    LogEvent,
    LogKind,
    NicReading,
    NvLinkReading,
    Recommendation,
    Severity,
    Step,
    StepStatus,
    TelemetrySample,
)

T0 = 1_765_000_000.0
KEY = SigningKey(b"fuzz-key-" + b"k" * 32, "fuzz")
KMSG = [
    "6,1234,5678901234,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
    "<3>[ 1234.567890] NVRM: Xid (PCI:0000:86:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double "
    "bit error (DBE) has been detected on GPU in the framebuffer at partition 1, subpartition 0.",
    "Dec  7 20:46:20 gpu-01 kernel: pcieport 0000:00:01.0: AER: Corrected error received: 0000:3b:00.0",
    "2026-12-07T20:46:20.123456+00:00 gpu-01 kernel: mlx5_core 0000:5e:00.0: mlx5_cmd_out_err:838: "
    "health compromised - reached miss count",
]
DCGM = """# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",pci_bus_id="00000000:3B:00.0",Hostname="gpu-01"} 41
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-1",pci_bus_id="00000000:3B:00.0",Hostname="gpu-01"} 312.5
# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",UUID="GPU-1",pci_bus_id="00000000:3B:00.0",Hostname="gpu-01"} 0
"""
SQUEUE = json.dumps({"jobs": [{"job_id": 42, "job_state": ["RUNNING"], "nodes": "gpu-[01-02]", "user_id": 1000,
                               "restart_cnt": 0, "eligible_time": {"set": True, "number": T0}}]})
SINFO = json.dumps({"nodes": [{"name": "gpu-01", "state": ["IDLE", "DRAIN"], "reason": "sentinel: inc-1 x",
                               "reason_changed_at": {"set": True, "number": T0}}]})


def _sample() -> TelemetrySample:
    gpus = [GpuReading(index=i, uuid=f"GPU-{i}", pci_bus_id=f"0000:{i:02x}:00.0", temp_c=60.0 + i, power_w=400.0,
                       ecc_sbe_volatile=i, pcie_replay=0, pcie_link_width=16, pcie_link_width_max=16,
                       nvlinks=[NvLinkReading(link=k, crc_errors=0, replay_errors=0) for k in range(4)],
                       deltas={"ecc_sbe_volatile": 0}) for i in range(8)]
    nics = [NicReading(name=f"mlx5_{i}/1", link_layer="infiniband", counters={"symbol_error": 0, "link_downed": 0,
                                                                               "port_xmit_data": 10**9})
            for i in range(4)]
    return TelemetrySample(node="gpu-01", ts=T0, seq=7, gpus=gpus, nics=nics, jobs=["42"],
                           host=HostReading(boot_id="b", uptime_s=1000.0, load1=1.0))


def seeds() -> list[bytes]:
    """Valid messages of every kind the decoders read."""
    finding = Finding(id="f-1", node="gpu-01", ts=T0, observed_ts=T0, kind=FindingClass.GPU_XID, rule="xid-catalog",
                      severity=Severity.FATAL, recommendation=Recommendation.DRAIN, confidence=1.0, summary="Xid 79",
                      gpu_index=0, evidence={"xid": 79})
    result = ActionResult(id="c-1:drain", command_id="c-1", incident_id="inc-1", node="gpu-01", ts=T0,
                          step=Step.DRAIN, status=StepStatus.OK, detail="drained", job_ids=["42"])
    command = Command(id="c-1", decision_id="d-1", incident_id="inc-1", node="gpu-01",
                      action=ActionKind.CHECKPOINT_DRAIN_REQUEUE, ts=T0, expires_ts=T0 + 300,
                      drain_reason="sentinel: inc-1 Xid 79")
    log = LogEvent(node="gpu-01", ts=T0, kind=LogKind.XID, message=KMSG[0], xid=79, pci_bus_id="0000:3b:00",
                   attrs={"pid": "1234"})
    sample = codec.encode(_sample())
    return [
        sample, codec.encode(log), Sealer(KEY, Finding).seal(finding), Sealer(KEY, ActionResult).seal(result),
        codec.encode(CommandSigner(KEY).seal(command)),
        codec.encode(DeadLetter(ts=T0, reason="bad", source_topic="sentinel.telemetry", source_offset=1,
                                key="gpu-01", payload=sample[:200])),
        *(line.encode() for line in KMSG), DCGM.encode(), SQUEUE.encode(), SINFO.encode(),
    ]


class Mutator:
    """Seeded mutations of JSON (structure-aware) and of raw bytes."""

    ODD: tuple[Any, ...] = (None, True, False, 0, -1, -(2**63), 2**64, 1e308, -1e308, "NaN", "", "x" * 10_000, [], {},
                            [[[[]]]], {"type": "telemetry"}, "gpu 01; rm -rf /", "\u0000", 1.5, "../../etc/passwd")

    def __init__(self, rng: random.Random, pool: list[bytes]) -> None:
        self.rng = rng
        self.pool = pool

    def __call__(self, seed: bytes) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.55:
            try:
                tree = json.loads(seed)
            except ValueError:
                return self.bytes_(seed)
            for _ in range(rng.randint(1, 3)):
                tree = self.tree(tree, depth=0)
            try:
                data = json.dumps(tree, allow_nan=True).encode()
            except (ValueError, RecursionError):
                return self.bytes_(seed)
            # what the transport refuses (codec.MAX_MESSAGE_BYTES) never reaches a decoder: keep it at the edge
            return data if len(data) <= codec.MAX_MESSAGE_BYTES else data[: codec.MAX_MESSAGE_BYTES + 1]
        if roll < 0.6:
            depth = rng.choice((100, 1000, 20_000))
            return b"[" * depth + b"]" * depth if rng.random() < 0.5 else b'{"a":' * depth + b"1" + b"}" * depth
        return self.bytes_(seed)

    def tree(self, node: Any, depth: int) -> Any:
        rng = self.rng
        if depth > 12 or not isinstance(node, dict | list) or not node or rng.random() < 0.25:
            return self.leaf(node)
        if isinstance(node, dict):
            key = rng.choice(list(node))
            roll = rng.random()
            if roll < 0.1:
                node.pop(key)
            elif roll < 0.2:
                node[rng.choice(("extra", "gpus", "nvlinks", "v", "type", key + "_"))] = self.leaf(None)
            else:
                node[key] = self.tree(node[key], depth + 1)
            return node
        index = rng.randrange(len(node))
        roll = rng.random()
        if roll < 0.08:
            return node * rng.choice((2, 100, 1_000))  # grown: hundreds of GPUs, links, NICs (duplicates too)
        if roll < 0.15:
            node.pop(index)
            return node
        node[index] = self.tree(node[index], depth + 1)
        return node

    def leaf(self, value: Any) -> Any:
        rng = self.rng
        if isinstance(value, int | float) and not isinstance(value, bool) and rng.random() < 0.5:
            return rng.choice((value * -1, value + 1, value * 1e6, float("nan"), float("inf"), 2**63, -(2**63) - 1))
        if isinstance(value, str) and rng.random() < 0.4:
            return rng.choice((value * 50, value[: len(value) // 2], value + "\x00", value.upper()))
        return rng.choice(self.ODD)

    def bytes_(self, seed: bytes) -> bytes:
        rng = self.rng
        data = bytearray(seed)
        for _ in range(rng.randint(1, 8)):
            kind = rng.random()
            if not data:
                data.extend(rng.randbytes(rng.randint(1, 64)))
            elif kind < 0.35:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif kind < 0.55:
                del data[rng.randrange(len(data)):]
            elif kind < 0.75:
                at = rng.randrange(len(data))
                data[at:at] = rng.randbytes(rng.randint(1, 16))
            elif kind < 0.9:
                other = rng.choice(self.pool)
                cut = rng.randrange(len(other) + 1)
                data[rng.randrange(len(data)):] = other[cut:]
            else:
                at = rng.randrange(len(data))
                data[at:at] = rng.choice((b"1e999", b"-1", b"18446744073709551616", b"null", b'"', b"\\u0000", b"{}"))
        return bytes(data)


def decoders() -> dict[str, Callable[[bytes], object]]:
    """Every decoder of outside bytes, as the services call it."""
    from sentinel_collectors.dcgm import DcgmCollector
    from sentinel_collectors.kmsg import parse_line

    limits = LimitsConfig()
    verifier = CommandVerifier([KEY], MemoryNonces(), ManualClock(T0), 3600.0)
    findings, results = Opener([KEY], Finding), Opener([KEY], ActionResult)

    def telemetry(data: bytes) -> object:
        view = decode_view(data)
        check_shape(view, limits)
        return view

    def text(data: bytes) -> str:
        return data.decode("utf-8", errors="replace")

    return {
        "wire_record": codec.decode,
        "telemetry_view": telemetry,
        "telemetry_whole": lambda d: codec.decode_as(d, TelemetrySample),
        "log_event": lambda d: codec.decode_as(d, LogEvent),
        "sealed_finding": findings.open,
        "sealed_result": results.open,
        "signed_command": verifier.check,
        "kmsg_line": lambda d: parse_line(text(d), "gpu-01", T0),
        "dcgm_scrape": lambda d: DcgmCollector(fetch=lambda url, timeout: text(d)).read(),
        "squeue_json": lambda d: parse_jobs(text(d)),
        "sinfo_json": lambda d: parse_nodes(text(d)),
    }


def run_fuzz(messages: int, seed: int = 1, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    pool = seeds()
    mutate = Mutator(rng, pool)
    every = decoders()
    tally = {name: {"accepted": 0, "refused": 0, "crashes": 0} for name in every}
    examples: list[dict[str, str]] = []
    started = time.perf_counter()
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    largest, rss_half = 0, 0.0
    for n in range(messages):
        if n == messages // 2:
            rss_half = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        data = mutate(rng.choice(pool))
        largest = max(largest, len(data))
        for name, decode in every.items():
            try:
                decode(data)
                tally[name]["accepted"] += 1
            except SentinelError:
                tally[name]["refused"] += 1
            except Exception as exc:  # noqa: BLE001 - what the benchmark is looking for
                tally[name]["crashes"] += 1
                if len(examples) < 10:
                    examples.append({"decoder": name, "error": f"{type(exc).__name__}: {exc}"[:300],
                                     "message_head": data[:120].decode("utf-8", errors="replace")})
        if progress is not None and n and n % 20_000 == 0:
            progress(f"{n:,}/{messages:,} messages")
    seconds = time.perf_counter() - started
    return {
        "messages": messages,
        "decoders": len(every),
        "decodes": messages * len(every),
        "crashes": sum(t["crashes"] for t in tally.values()),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_at_start_mib": round(rss_start, 1),
        "rss_at_half_mib": round(rss_half, 1),  # peak after half the messages: no growth after it, no leak
        "largest_message_bytes": largest,
        "seconds": round(seconds, 1),
        "messages_per_s": round(messages / seconds) if seconds else None,
        "seed": seed,
        "by_decoder": tally,
        "crash_examples": examples,
    }


def render_fuzz(result: dict[str, Any]) -> str:
    lines = [f"{result['messages']:,} mutated messages x {result['decoders']} decoders in {result['seconds']} s "
             f"(seed {result['seed']}); crashes {result['crashes']}",
             f"peak RSS {result['max_rss_mib']} MiB (at start {result['rss_at_start_mib']}, after half the messages "
             f"{result['rss_at_half_mib']}); largest message {result['largest_message_bytes']:,} bytes",
             "", f"{'decoder':<16} {'accepted':>9} {'refused':>9} {'crashes':>8}"]
    for name, t in result["by_decoder"].items():
        lines.append(f"{name:<16} {t['accepted']:>9,} {t['refused']:>9,} {t['crashes']:>8,}")
    for example in result["crash_examples"]:
        lines.append(f"crash in {example['decoder']}: {example['error']} | {example['message_head']!r}")
    return "\n".join(lines)

