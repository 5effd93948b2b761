"""Where the detector's time goes, per message, in process: `python bench/detector_parts.py [--nodes N]`.

The detector as shipped (`benchmarks.pipeline._detector`: every rule, the cached hazard model, the host model)
on the embedded transport: windows filled first, then ``--rounds`` more samples per node, one slot boundary of
the hazard model inside them, with ``perf_counter`` wrapped around decode, push, rules and ``remember``. The
wrappers add ~0.3 µs to each part they time. docs/benchmarks.md (Pipeline) quotes its output.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from typing import Any

from sentinel.benchmarks import pipeline, pipeline_samples
from sentinel.clock import ManualClock
from sentinel.detector import service, windows
from sentinel.detector.service import relax_gc
from sentinel.sim.trainset import cached_model
from sentinel.transport import TELEMETRY
from sentinel.transport.memory import MemoryTransport

spent: dict[str, float] = {}


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - started
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=60, help="samples per node measured after the warm-up")
    args = parser.parse_args()
    relax_gc()
    service.sample_rules = timed("rules", service.sample_rules)  # type: ignore[assignment]
    service.remember = timed("remember", service.remember)  # type: ignore[assignment]
    windows.NodeWindow.push = timed("push", windows.NodeWindow.push)  # type: ignore[method-assign]
    service.Detector._decode = timed("decode", service.Detector._decode)  # type: ignore[method-assign]
    warm, n = 61 * args.nodes, args.rounds * args.nodes  # 61 s of samples fill the 60-sample windows
    messages = pipeline_samples.messages(warm + n, args.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        transport = MemoryTransport(10**7)
        detector = pipeline._detector(transport, pipeline._store(tmp), cached_model(), ManualClock(), "parts")
        for message in messages[:warm]:
            transport.publish(TELEMETRY, None, message)
        while detector.step(5000):
            pass
        spent.clear()
        assert detector.hazard is not None
        detector.hazard.score_s = 0.0
        for message in messages[warm:]:
            transport.publish(TELEMETRY, None, message)
        started = time.perf_counter()
        while detector.step(5000):
            pass
        elapsed = time.perf_counter() - started
    print(f"whole step {elapsed / n * 1e6:.1f} us per message ({n} messages, {args.nodes} nodes)")
    print(f"  hazard model (score_s) {detector.hazard.score_s / n * 1e6:.1f}")
    for name, seconds in spent.items():
        print(f"  {name} {seconds / n * 1e6:.1f}")


if __name__ == "__main__":
    main()
