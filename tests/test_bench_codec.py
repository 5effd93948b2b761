"""The benchmarks' node sample is the message the agent sends: the NVML collector's fields, not a lighter one."""

from __future__ import annotations

from pathlib import Path

import msgspec

from sentinel import codec
from sentinel.events import TelemetrySample
from sentinel.testing import FakeNvml, healthy_fields
from sentinel_bench.codec import sample_message
from sentinel_collectors.nic import NicCollector
from sentinel_collectors.nvml import NvmlCollector


def _filled(struct: msgspec.Struct) -> set[str]:
    return {k for k, v in msgspec.structs.asdict(struct).items() if v not in (None, [], {})}


def test_the_bench_sample_sets_every_gpu_field_the_nvml_collector_sets() -> None:
    fake = FakeNvml(8)
    for gpu in fake.gpus:
        gpu.fields = healthy_fields()
    nvml = NvmlCollector(fake, node="n1")
    nvml.read()
    collected = nvml.read()  # the second read has the counters' deltas
    sample = sample_message()
    assert len(sample.gpus) == len(collected) == 8
    for ours, theirs in zip(sample.gpus, collected, strict=True):
        assert _filled(ours) == _filled(theirs)
        assert [link.link for link in ours.nvlinks] == [link.link for link in theirs.nvlinks]
        assert _filled(ours.nvlinks[0]) == _filled(theirs.nvlinks[0]) and ours.deltas.keys() == theirs.deltas.keys()
    assert codec.decode_as(codec.encode(sample), TelemetrySample) == sample


def test_the_bench_sample_has_the_nic_readings_the_nic_collector_makes_of_a_recorded_node() -> None:
    """Every counter file of a ConnectX InfiniBand port and of an Ethernet interface, each with its delta (the
    collector's second read), as in the recorded sysfs tree; before, the ports had 3 counters and no deltas."""
    nic = NicCollector(Path(__file__).parent / "fixtures" / "sysfs")
    nic.read()
    collected = {r.name: r for r in nic.read()}
    sample = sample_message()
    ports = [r for r in sample.nics if r.link_layer == "infiniband"]
    assert len(ports) == len(sample.gpus)
    for ours, theirs in [*((p, collected["mlx5_0/1"]) for p in ports), (sample.nics[-1], collected["eth0"])]:
        assert _filled(ours) == _filled(theirs)
        assert ours.counters.keys() == theirs.counters.keys() == ours.deltas.keys() == theirs.deltas.keys()
