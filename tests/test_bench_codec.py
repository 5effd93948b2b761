"""The benchmarks' node sample is the message the agent sends: the NVML collector's fields, not a lighter one."""

from __future__ import annotations

import msgspec

from sentinel import codec
from sentinel.benchmarks.codec import sample_message
from sentinel.collectors.nvml import NvmlCollector
from sentinel.events import TelemetrySample
from sentinel.testing import FakeNvml, healthy_fields


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
