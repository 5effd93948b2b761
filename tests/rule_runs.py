"""Feeding literal samples through the detector's per-sample rules, as the detector service does."""

from __future__ import annotations

from sentinel.config import DetectorConfig, from_mapping
from sentinel.detector.rules import sample_rules
from sentinel.detector.sample_view import GpuView, view_of
from sentinel.detector.windows import NodeWindow
from sentinel.events import Finding, TelemetrySample

CFG: DetectorConfig = from_mapping({}).detector


def run_rules(samples: list[TelemetrySample], gpus: int = 4) -> list[tuple[float, Finding]]:
    """(sample time, finding) for every finding the rules raise over ``samples`` of one node, in order."""
    window, found = NodeWindow(CFG.window_samples, gpus), []
    previous: dict[int, GpuView] = {}
    for s in map(view_of, samples):
        readings = window.push(s)
        found += [(s.ts, f) for f in sample_rules(window, s, CFG, s.ts, previous, readings)]
        previous = {g.index: g for g in s.gpus}
    return found
