"""``sentinel-bench codec``: why the wire codec is msgspec JSON.

Encodes and decodes realistic 8-GPU telemetry samples with: msgspec JSON (validated, our codec), msgspec
MessagePack (validated), the standard library's json (no validation at all: the floor for "just parse it"), and
stdlib json followed by msgspec.convert (validated). Reports messages/s and bytes per message.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any

import msgspec

from sentinel import codec
from sentinel.events import GpuReading, HostReading, NicReading, NvLinkReading, TelemetrySample
from sentinel.tables import render
from sentinel_collectors.nvml import COUNTER_FIELDS, NVLINK_LINKS

# The counter files of a ConnectX InfiniBand port (counters/ and mlx5 hw_counters/; domain.md, NIC counters) and of
# an Ethernet interface (statistics/ and the carrier counts), as the recorded sysfs tree in tests/fixtures has them.
IB_PORT_COUNTERS = (
    "VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery", "local_ack_timeout_err",
    "local_link_integrity_errors", "out_of_sequence", "packet_seq_err", "port_rcv_data", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "port_xmit_data", "port_xmit_discards", "port_xmit_wait", "rnr_nak_retry_err",
    "roce_slow_restart", "symbol_error")
ETHERNET_STATISTICS = (
    "carrier_changes", "carrier_down_count", "carrier_up_count", "rx_bytes", "rx_crc_errors", "rx_dropped", "rx_errors",
    "rx_fifo_errors", "rx_missed_errors", "rx_over_errors", "rx_packets", "tx_bytes", "tx_carrier_errors",
    "tx_dropped", "tx_errors", "tx_packets")


def sample_message(node: int = 1, gpus: int = 8) -> TelemetrySample:
    """One node's sample as the agent sends it from NVML: every field the NVML collector sets on a GPU (the same
    set, checked by tests/test_bench_codec.py), an InfiniBand port per GPU, an Ethernet interface and the host."""
    readings = [
        GpuReading(
            index=i,
            uuid=f"GPU-{node:04d}{i:012d}",
            pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
            model="NVIDIA H100 80GB HBM3",
            temp_c=60.0 + i,
            mem_temp_c=64.5,
            power_w=612.3,
            power_limit_w=700.0,
            sm_clock_mhz=1980.0,
            mem_clock_mhz=2619.0,
            util_gpu_pct=97.0,
            util_mem_pct=43.0,
            mem_used_bytes=77 * 2**30,
            mem_total_bytes=80 * 2**30,
            throttle_reasons=0,
            ecc_sbe_volatile=3,
            ecc_dbe_volatile=0,
            ecc_sbe_aggregate=12,
            ecc_dbe_aggregate=0,
            retired_pages_pending=0,
            row_remap_failure=False,
            pcie_replay=1,
            # what the NVML collector adds (sentinel_collectors/nvml.py): more counters and flags, the 12 NVLinks NVML
            # has per-link fields for, and each counter's increase since the previous read
            retired_pages_sbe=0, retired_pages_dbe=0, row_remap_correctable=0, row_remap_uncorrectable=0,
            row_remap_pending=False, fan_pct=40.0, pstate=0, recovery_action=0,
            pcie_link_gen=5, pcie_link_gen_max=5, pcie_link_width=16, pcie_link_width_max=16,
            nvlinks=[NvLinkReading(link=link, active=True, crc_errors=0, crc_data_errors=0, replay_errors=0,
                                   recovery_errors=0)
                     for link in range(NVLINK_LINKS)],
            deltas=dict.fromkeys(COUNTER_FIELDS, 0),
        )
        for i in range(gpus)
    ]
    # What the NIC collector reads (sentinel_collectors.nic, every counter file, with deltas from the second read on):
    # one InfiniBand port per GPU (HGX H100's compute fabric) with the counters of a ConnectX port as recorded in
    # tests/fixtures/sysfs, and the management Ethernet interface. tests/test_bench_codec.py keeps them equal.
    ib_counters = {name: 0 for name in IB_PORT_COUNTERS}
    nics = [
        NicReading(
            name=f"mlx5_{i}/1",
            link_layer="infiniband",
            state="4: ACTIVE",
            carrier=True,
            speed_mbps=400_000,
            counters={**ib_counters, "port_rcv_data": 123456789 * (i + 1), "port_xmit_data": 98765432 * (i + 1)},
            deltas={**ib_counters, "port_rcv_data": 4_000_000, "port_xmit_data": 3_900_000},
        )
        for i in range(gpus)
    ]
    eth = {name: 0 for name in ETHERNET_STATISTICS}
    nics.append(NicReading(name="eth0", link_layer="ethernet", state="up", carrier=True, speed_mbps=100_000, mtu=9000,
                           counters={**eth, "rx_bytes": 987654321, "tx_bytes": 123456789, "carrier_up_count": 1},
                           deltas={**eth, "rx_bytes": 52_000, "tx_bytes": 48_000}))
    return TelemetrySample(
        node=f"gpu-node-{node:03d}",
        ts=1.7e9,
        seq=1,
        gpus=readings,
        nics=nics,
        host=HostReading(boot_id="b" * 32, uptime_s=864000.5, load1=12.5, load5=11.8, cpu_util_pct=40.0,
                         mem_total_bytes=2 * 2**40, mem_available_bytes=2**40, disk_used_pct=31.5),
    )


def _rate(fn: Callable[[], Any], n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - started)


def run_codec_bench(messages: int = 20_000) -> dict[str, Any]:
    sample = sample_message()
    as_json = codec.encode(sample)
    mp_enc, mp_dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(TelemetrySample)
    as_mp = mp_enc.encode(sample)
    builtins = msgspec.to_builtins(sample)
    assert codec.decode_as(as_json, TelemetrySample) == sample and mp_dec.decode(as_mp) == sample
    rows = {
        "msgspec-json (ours, validated)": (
            lambda: codec.encode(sample),
            lambda: codec.decode_as(as_json, TelemetrySample),
            len(as_json),
        ),
        "msgspec-msgpack (validated)": (lambda: mp_enc.encode(sample), lambda: mp_dec.decode(as_mp), len(as_mp)),
        "stdlib json (no validation)": (
            lambda: json.dumps(builtins).encode(),
            lambda: json.loads(as_json),
            len(as_json),
        ),
        "stdlib json + msgspec.convert": (
            lambda: json.dumps(builtins).encode(),
            lambda: msgspec.convert(json.loads(as_json), TelemetrySample),
            len(as_json),
        ),
    }
    results = {
        name: {
            "encode_msgs_per_s": round(_rate(enc, messages)),
            "decode_msgs_per_s": round(_rate(dec, messages)),
            "bytes_per_msg": size,
        }
        for name, (enc, dec, size) in rows.items()
    }
    return {"messages": messages, "gpus_per_message": len(sample.gpus), "codecs": results,
            "compression": compression_table(mp_enc)}


def _compressors() -> dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]]:
    """The codecs a Kafka producer batch can use, as kafka-python calls them (lz4 and zstd when installed)."""
    import gzip

    found: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
        "none": (lambda b: b, lambda b: b), "gzip": (gzip.compress, gzip.decompress)}
    try:
        import lz4.frame

        found["lz4"] = (lz4.frame.compress, lz4.frame.decompress)
    except ImportError:
        pass
    try:
        import zstandard

        found["zstd"] = (zstandard.ZstdCompressor().compress, zstandard.ZstdDecompressor().decompress)
    except ImportError:
        pass
    return found


def _live(sample: TelemetrySample, rng: random.Random) -> TelemetrySample:
    """``sample`` with the readings that differ from node to node and read to read drawn at random."""
    gpus = [msgspec.structs.replace(g, temp_c=round(rng.gauss(60, 3), 1), power_w=round(rng.gauss(600, 30), 1),
                                    mem_temp_c=round(rng.gauss(64, 3), 1), util_gpu_pct=float(rng.randint(90, 100)),
                                    mem_used_bytes=rng.randint(70, 79) * 2**30 + rng.randint(0, 2**20),
                                    ecc_sbe_volatile=rng.randint(0, 20), pcie_replay=rng.randint(0, 5))
            for g in sample.gpus]
    nics = []
    for nic in sample.nics:
        counters, deltas = _traffic(rng, nic.link_layer)
        nics.append(msgspec.structs.replace(nic, counters={**nic.counters, **counters},
                                            deltas={**nic.deltas, **deltas}))
    return msgspec.structs.replace(sample, ts=1.7e9 + rng.random(), gpus=gpus, nics=nics)


def _traffic(rng: random.Random, link_layer: str) -> tuple[dict[str, int], dict[str, int]]:
    """Live-like traffic counters of one NIC (and their increase over a second): they differ on every read."""
    names = (("port_rcv_data", "port_xmit_data", "port_xmit_wait") if link_layer == "infiniband"
             else ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets"))
    return ({name: rng.randint(0, 2**48) for name in names}, {name: rng.randint(0, 2**30) for name in names})


def compression_table(mp_enc: msgspec.msgpack.Encoder, nodes: int = 200, batches: int = 20) -> dict[str, Any]:
    """Bytes on the broker and CPU per message for each wire encoding x batch compression: ``nodes`` distinct
    samples per batch (a producer batch holds many nodes' samples) with live-like noise in the readings;
    ``bytes_per_msg_alone``: each sample compressed alone, as a node agent's one-sample produce requests reach the
    broker (record-batch headers not counted)."""
    rng = random.Random(7)  # live readings differ from node to node and GPU to GPU: noise, as in a real batch
    samples = [_live(sample_message(i + 1), rng) for i in range(nodes)]
    encodings = {"json": [codec.encode(x) for x in samples], "msgpack": [mp_enc.encode(x) for x in samples]}
    out: dict[str, Any] = {}
    for encoding, blobs in encodings.items():
        batch = b"".join(blobs)
        for name, (compress, decompress) in _compressors().items():
            packed = compress(batch)
            started = time.perf_counter()
            for _ in range(batches):
                compress(batch)
            squeeze = time.perf_counter() - started
            started = time.perf_counter()
            for _ in range(batches):
                decompress(packed)
            expand = time.perf_counter() - started
            alone = sum(len(compress(blob)) for blob in blobs) / nodes  # each sample its own batch, as agents send
            out[f"{encoding}+{name}"] = {"bytes_per_msg": round(len(packed) / nodes),
                                         "bytes_per_msg_alone": round(alone),
                                         "compress_us_per_msg": round(squeeze / (batches * nodes) * 1e6, 2),
                                         "decompress_us_per_msg": round(expand / (batches * nodes) * 1e6, 2)}
    return out


def render_codec(result: dict[str, Any]) -> str:
    rows = [{"codec": name, **values} for name, values in result["codecs"].items()]
    head = (f"{result['messages']} messages of one node with {result['gpus_per_message']} GPUs, an InfiniBand port "
            "per GPU, Ethernet, host")
    return (
        head
        + "\n"
        + render(
            rows,
            [
                ("codec", "codec"),
                ("encode_msgs_per_s", "encode msg/s"),
                ("decode_msgs_per_s", "decode msg/s"),
                ("bytes_per_msg", "bytes/msg"),
            ],
        )
        + "\n\nOn the broker (200 nodes' samples in one producer batch, compressed whole; and each alone, as "
        "agents send them):\n"
        + render([{"wire": k, **v} for k, v in result["compression"].items()],
                 [("wire", "encoding+compression"), ("bytes_per_msg", "bytes/msg"),
                  ("bytes_per_msg_alone", "bytes/msg alone"),
                  ("compress_us_per_msg", "compress us/msg"), ("decompress_us_per_msg", "decompress us/msg")])
    )
