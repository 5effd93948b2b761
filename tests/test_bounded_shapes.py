"""Bounded shapes (issue 38, item 5): on e5bcaaa one 0.6 MB sample with 50,000 GPU entries built a 123 MB detector
window, and duplicate GPU indices were accepted. The schema's ceilings stop decoding of anything larger
(``sentinel.events.MAX_*``); ``detector.limits`` holds the site's caps; duplicates are refused; each refusal is a
dead letter with its reason and the next good sample is handled."""

from __future__ import annotations

import pytest

from sentinel import codec
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.detector.sample_view import decode_view
from sentinel.detector.service import Detector
from sentinel.errors import CodecError
from sentinel.events import DeadLetter, GpuReading, NicReading, NvLinkReading, TelemetrySample
from sentinel.obs.metrics import Metrics
from sentinel.store.repository import Repository
from sentinel.transport import DEAD_LETTERS, TELEMETRY
from sentinel.transport.memory import MemoryTransport


def _sample(gpus: int = 8, **kw: object) -> TelemetrySample:
    return TelemetrySample(node="gpu-01", ts=1.0, gpus=[GpuReading(index=i) for i in range(gpus)], **kw)  # type: ignore[arg-type]


def test_fifty_thousand_gpus_do_not_decode() -> None:
    one = b'{"index":0}'
    data = codec.encode(_sample(0)).replace(b'"gpus":[]', b'"gpus":[' + b",".join([one] * 50_000) + b"]")
    assert len(data) > 500_000
    for decode in (codec.decode, decode_view):
        with pytest.raises(CodecError, match="length"):
            decode(data)


def test_counters_past_the_ceiling_do_not_decode() -> None:
    nic = NicReading(name="eth0", counters={f"c{i}": i for i in range(513)})
    with pytest.raises(CodecError, match="length"):
        codec.decode(codec.encode(_sample(1, nics=[nic])))


@pytest.mark.parametrize(("sample", "reason"), [
    (_sample(17), "17 GPUs on gpu-01: more than detector.limits.max_gpus (16)"),
    (TelemetrySample(node="gpu-01", ts=1.0, gpus=[GpuReading(index=3), GpuReading(index=3)]),
     "GPU index 3 given twice"),
    (_sample(1, nics=[NicReading(name="mlx5_0/1"), NicReading(name="mlx5_0/1")]), "NIC 'mlx5_0/1' given twice"),
    (TelemetrySample(node="gpu-01", ts=1.0, gpus=[GpuReading(index=0, nvlinks=[NvLinkReading(link=2)] * 2)]),
     "NVLink 2 given twice on GPU 0"),
    (TelemetrySample(node="gpu-01", ts=1.0, gpus=[GpuReading(index=0, nvlinks=[NvLinkReading(link=i)
                                                                              for i in range(19)])]),
     "19 NVLinks on GPU 0 of gpu-01: more than detector.limits.max_nvlinks (18)"),
    (_sample(1, nics=[NicReading(name=f"eth{i}") for i in range(65)]), "65 NICs"),
    (TelemetrySample(node="gpu-01", ts=1.0, gpus=[GpuReading(index=1023)]),  # would widen the window to 1,024
     "GPU index 1023 on gpu-01: beyond detector.limits.max_gpus (16)"),
])
def test_a_sample_over_a_cap_or_with_a_duplicate_is_a_dead_letter_and_the_next_is_handled(
        repo: Repository, sample: TelemetrySample, reason: str) -> None:
    transport = MemoryTransport()
    detector = Detector(transport, repo, from_mapping({}).detector, Metrics(), ManualClock(100.0))
    letters = transport.consumer("d", [DEAD_LETTERS])
    transport.publish(TELEMETRY, "gpu-01", codec.encode(sample))
    transport.publish(TELEMETRY, "gpu-01", codec.encode(_sample(8, seq=1)))
    assert detector.step() == 2
    [letter] = [codec.decode_as(m.value, DeadLetter) for m in letters.poll(10)]
    assert reason in letter.reason
    assert detector.windows["gpu-01"].gpus == 8  # only the good sample reached the window


def test_a_site_may_raise_its_caps_up_to_the_ceiling(repo: Repository) -> None:
    transport = MemoryTransport()
    config = from_mapping({"detector": {"limits": {"max_gpus": 32}}}).detector
    detector = Detector(transport, repo, config, Metrics(), ManualClock(100.0))
    transport.publish(TELEMETRY, "gpu-01", codec.encode(_sample(24)))
    detector.step()
    assert detector.windows["gpu-01"].gpus == 24
    with pytest.raises(Exception, match=r"max_gpus: must be in \[1, 64\]"):
        from_mapping({"detector": {"limits": {"max_gpus": 65}}})
