"""Where the detector's time goes, per message, in process: `python benchmarks/scripts/detector_parts.py [--nodes N]`.

The detector as shipped (`sentinel_bench.pipeline.detector_as_shipped`: every rule, the shipped hazard model, the
host model) on the embedded transport: windows filled first, then ``--rounds`` more samples per node, one slot
boundary of the hazard model inside them, timed whole; then the same rounds once more under ``cProfile``, whose
cumulative time per part (decode, window push, rules, ``remember``) gives each part's share, scaled to the
unprofiled whole step. Nothing in the detector is replaced or wrapped. docs/benchmarks.md (Pipeline) quotes it.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time

from sentinel.clock import ManualClock
from sentinel.detector.service import Detector, relax_gc
from sentinel.sim.trainset import cached_model
from sentinel.transport import TELEMETRY
from sentinel.transport.memory import MemoryTransport
from sentinel_bench import pipeline, pipeline_samples

# part -> (file name ending, function name) as cProfile names them
PARTS = {"decode": ("detector/service.py", "_decode"), "push": ("detector/windows.py", "push"),
         "rules": ("detector/rules.py", "sample_rules"), "remember": ("detector/rules.py", "remember")}


def run_rounds(detector: Detector, transport: MemoryTransport, messages: list[bytes]) -> float:
    for message in messages:
        transport.publish(TELEMETRY, None, message)
    started = time.perf_counter()
    while detector.step(5000):
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=60, help="samples per node measured after the warm-up")
    args = parser.parse_args()
    relax_gc()
    warm, n = 61 * args.nodes, args.rounds * args.nodes  # 61 s of samples fill the 60-sample windows
    messages = pipeline_samples.messages(warm + 2 * n, args.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        transport = MemoryTransport(10**7)
        detector = pipeline.detector_as_shipped(transport, pipeline.scratch_store(tmp), cached_model(),
                                                ManualClock(), "parts")
        run_rounds(detector, transport, messages[:warm])
        assert detector.hazard is not None
        detector.hazard.score_s = 0.0
        elapsed = run_rounds(detector, transport, messages[warm:warm + n])
        hazard_s = detector.hazard.score_s
        profile = cProfile.Profile()
        profile.enable()
        run_rounds(detector, transport, messages[warm + n:])
        profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    total = sum(tt for (_, _, _), (_, _, tt, _, _) in stats.items())
    print(f"whole step {elapsed / n * 1e6:.1f} us per message ({n} messages, {args.nodes} nodes)")
    print(f"  hazard model (score_s) {hazard_s / n * 1e6:.1f}")
    for part, (ending, name) in PARTS.items():
        cumulative = sum(ct for (path, _, func), (_, _, _, ct, _) in stats.items()
                         if func == name and path.endswith(ending))
        print(f"  {part} {cumulative / total * elapsed / n * 1e6:.1f} (cProfile share {cumulative / total:.1%})")


if __name__ == "__main__":
    main()
