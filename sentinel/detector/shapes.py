"""Bounded shapes (issue 38): a telemetry sample the detector takes into its windows holds at most the site's GPUs,
NVLinks and NICs, each named once.

The schema's ceilings (``sentinel.events.MAX_*``) already stop decoding of anything larger; ``detector.limits``
holds the site's tighter caps (defaults fit every NVIDIA server made so far). A sample over a cap, or with one GPU
index, NIC name or NVLink given twice, is refused before it reaches a window: a dead letter with the reason, never
a partial sample (duplicates would make one GPU's rules read another's counters).
"""

from __future__ import annotations

from collections.abc import Iterable

from sentinel.config.detector import LimitsConfig
from sentinel.detector.sample_view import SampleView
from sentinel.errors import CodecError


def _repeated(values: Iterable[object]) -> object | None:
    seen: set[object] = set()
    for value in values:
        if value in seen:
            return value
        seen.add(value)
    return None


def check_shape(sample: SampleView, limits: LimitsConfig) -> None:
    """Raise ``CodecError`` naming the cap or the duplicate when ``sample`` does not fit ``limits``."""
    if len(sample.gpus) > limits.max_gpus:
        raise CodecError(f"{len(sample.gpus)} GPUs on {sample.node}: more than detector.limits.max_gpus "
                         f"({limits.max_gpus})")
    if len(sample.nics) > limits.max_nics:
        raise CodecError(f"{len(sample.nics)} NICs on {sample.node}: more than detector.limits.max_nics "
                         f"({limits.max_nics})")
    if sample.gpus and (top := max(g.index for g in sample.gpus)) >= limits.max_gpus:  # indices run 0..n-1
        raise CodecError(f"GPU index {top} on {sample.node}: beyond detector.limits.max_gpus ({limits.max_gpus}); "
                         "a window is as wide as the highest index")
    if (index := _repeated(g.index for g in sample.gpus)) is not None:
        raise CodecError(f"GPU index {index} given twice on {sample.node}")
    if (name := _repeated(n.name for n in sample.nics)) is not None:
        raise CodecError(f"NIC {name!r} given twice on {sample.node}")
    for gpu in sample.gpus:
        if len(gpu.nvlinks) > limits.max_nvlinks:
            raise CodecError(f"{len(gpu.nvlinks)} NVLinks on GPU {gpu.index} of {sample.node}: more than "
                             f"detector.limits.max_nvlinks ({limits.max_nvlinks})")
        if (link := _repeated(link.link for link in gpu.nvlinks)) is not None:
            raise CodecError(f"NVLink {link} given twice on GPU {gpu.index} of {sample.node}")
