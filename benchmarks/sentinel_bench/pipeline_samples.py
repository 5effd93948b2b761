"""The node-messages ``sentinel-bench pipeline`` feeds the detector: the agent's sample (``benchmarks.codec``) for
each of ``nodes`` nodes, one per node and second of sample time, each node in a job of ``NODES_PER_JOB`` nodes."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from sentinel import codec
from sentinel.detector.sample_view import SampleView, view_of
from sentinel.events import GpuState, TelemetrySample
from sentinel.transport.node_auth import NodeSigner, node_secret
from sentinel_bench.codec import sample_message

NODES_PER_JOB = 16  # each node runs one job of 16 nodes (128 GPUs), so peer comparison has peers to compare
FIRST_TS = 1.7e9  # sample time of the first round
FLEET_SECRET = b"sentinel-bench fleet key: the same in every run, not a secret"  # security.fleet_key_file's role


def node_sample(i: int) -> TelemetrySample:
    """Node i's sample (the agent's, benchmarks.codec) naming its job: nodes 16k..16k+15 run job-k."""
    return msgspec.structs.replace(sample_message(i + 1), jobs=[f"job-{i // NODES_PER_JOB}"])


def samples(n: int, nodes: int, ts: float | None = None, first: int = 0) -> Iterator[tuple[int, TelemetrySample]]:
    """(k, sample) for k in first..first+n: node k % nodes, one sample per node and second of sample time."""
    base = [node_sample(i) for i in range(nodes)]
    for k in range(first, first + n):
        yield k, msgspec.structs.replace(base[k % nodes], ts=ts if ts is not None else FIRST_TS + k // nodes,
                                         seq=k // nodes + 1)


def views(n: int, nodes: int) -> Iterator[SampleView]:
    """What the detector decodes of ``samples(n, nodes)`` (the same times), each node's view built once."""
    base = [view_of(node_sample(i)) for i in range(nodes)]
    for k in range(n):
        yield msgspec.structs.replace(base[k % nodes], ts=FIRST_TS + k // nodes)


def _with_faults(n: int, nodes: int, fault_every: int, ts: float | None, tag: str,
                 first: int) -> Iterator[TelemetrySample]:
    for k, sample in samples(n, nodes, ts, first):
        if fault_every and k % fault_every == 0:
            lost = msgspec.structs.replace(sample.gpus[0], state=GpuState.LOST, temp_c=None)
            sample = msgspec.structs.replace(sample, node=f"lost{tag}-{k:07d}", gpus=[lost, *sample.gpus[1:]])
        yield sample


def messages(n: int, nodes: int, fault_every: int = 0, ts: float | None = None, tag: str = "",
             first: int = 0) -> list[bytes]:
    """``samples`` encoded; every ``fault_every``-th one from a node of its own whose GPU 0 fell off the bus."""
    return [codec.encode(sample) for sample in _with_faults(n, nodes, fault_every, ts, tag, first)]


def keyed(n: int, nodes: int, fault_every: int = 0, ts: float | None = None, tag: str = "", first: int = 0,
          signed: bool = True) -> list[tuple[str, bytes]]:
    """``messages`` as the agents publish them: (node name, message), the key naming the node and, ``signed``,
    each message signed with that node's key (``sentinel.transport.node_auth``), derived from ``FLEET_SECRET``."""
    signers: dict[str, NodeSigner] = {}
    out = []
    for sample in _with_faults(n, nodes, fault_every, ts, tag, first):
        data = codec.encode(sample)
        if signed:
            signer = signers.get(sample.node)
            if signer is None:
                signer = signers[sample.node] = NodeSigner(node_secret(FLEET_SECRET, sample.node))
            data = signer.frame(data)
        out.append((sample.node, data))
    return out
