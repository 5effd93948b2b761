"""Event-level scoring of alerts against labelled anomaly segments (the SMD/ASD protocol of docs/benchmarks.md).

Rows are sample indices; ``interval_s`` turns them into seconds. A labelled *segment* is one contiguous run of
``label == 1`` rows, half-open ``[start, end)``. An *alert* is one row index (the onset of an alert).

- An alert is a **hit** when it lies in ``[start - H, end)`` of some segment, with ``H = horizon_rows``; every
  other alert is a **false alarm**. Event precision = hit alerts / alerts; event recall = segments with at least
  one hit / segments; F1 their harmonic mean. With no alerts precision is 0 (nothing was found).
- **Lead time** of a detected segment = ``start - first hit`` in seconds, 0 when the first hit lies inside the
  segment (never negative); the mean is over detected segments. Detection delay is the other side:
  ``first hit - start`` when positive, else 0 (lead - delay = the signed mean of start - first hit).
- **False alarms per day** = false alarms / (rows x interval_s / 86,400), i.e. per machine-day.
- **Point-adjusted F1** (the literature's measure, reported beside, never alone): every row whose score exceeds
  the threshold is predicted; a segment with any predicted row counts as wholly predicted; F1 over rows.

``Counts`` add up, so the overall result over several machines is computed on pooled events, not averaged.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

DAY_S = 86_400.0


def segments(labels: npt.ArrayLike) -> list[tuple[int, int]]:
    """Contiguous runs of non-zero labels as half-open ``(start, end)`` row ranges."""
    flags = (np.asarray(labels) != 0).astype(np.int8)
    edges = np.diff(np.concatenate(([0], flags, [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]


@dataclass
class Counts:
    """Additive event and point counts for one machine (or pooled over many)."""

    alerts: int = 0
    hit_alerts: int = 0
    segments: int = 0
    detected: int = 0
    early: int = 0  # detected segments whose first hit came before the segment start
    lead_sum_s: float = 0.0
    delay_sum_s: float = 0.0
    days: float = 0.0
    pa_tp: int = 0
    pa_fp: int = 0
    pa_fn: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def metrics(self) -> dict[str, Any]:
        precision = self.hit_alerts / self.alerts if self.alerts else 0.0
        recall = self.detected / self.segments if self.segments else 0.0
        false_alarms = self.alerts - self.hit_alerts
        pa_precision = _ratio(self.pa_tp, self.pa_tp + self.pa_fp)
        pa_recall = _ratio(self.pa_tp, self.pa_tp + self.pa_fn)
        return {
            "event_precision": round(precision, 4),
            "event_recall": round(recall, 4),
            "event_f1": round(_f1(precision, recall), 4),
            "false_alarms_per_day": round(false_alarms / self.days, 4) if self.days else 0.0,
            "lead_time_mean_s": round(self.lead_sum_s / self.detected, 1) if self.detected else None,
            "detection_delay_mean_s": round(self.delay_sum_s / self.detected, 1) if self.detected else None,
            "pa_f1": round(_f1(pa_precision, pa_recall), 4),
            "alerts": self.alerts,
            "false_alarms": false_alarms,
            "segments": self.segments,
            "detected": self.detected,
            "detected_early": self.early,
            "days": round(self.days, 3),
        }


def _ratio(a: int, b: int) -> float:
    return a / b if b else 0.0


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def score_events(
    alerts: npt.ArrayLike,
    labels: npt.ArrayLike,
    exceed: npt.ArrayLike,
    interval_s: float,
    horizon_rows: int,
) -> Counts:
    """Score alert onsets and per-row exceedances of one machine against its labels (module docstring)."""
    label_arr = np.asarray(labels)
    exceed_arr = np.asarray(exceed, dtype=bool)
    if exceed_arr.shape != label_arr.shape:
        raise ValueError(f"exceed has {exceed_arr.shape[0]} rows, labels {label_arr.shape[0]}")
    if horizon_rows < 0:
        raise ValueError(f"horizon must be >= 0 rows, got {horizon_rows}")
    alert_rows = np.sort(np.asarray(alerts, dtype=np.int64))
    segs = segments(label_arr)
    hit = np.zeros(alert_rows.shape[0], dtype=bool)
    counts = Counts(alerts=int(alert_rows.shape[0]), segments=len(segs),
                    days=label_arr.shape[0] * interval_s / DAY_S)
    pa_pred = exceed_arr.copy()
    for start, end in segs:
        inside = (alert_rows >= start - horizon_rows) & (alert_rows < end)
        hit |= inside
        if inside.any():
            first = int(alert_rows[inside][0])
            counts.detected += 1
            counts.early += int(first < start)
            counts.lead_sum_s += max(0, start - first) * interval_s
            counts.delay_sum_s += max(0, first - start) * interval_s
        if exceed_arr[start:end].any():
            pa_pred[start:end] = True
    truth = label_arr != 0
    counts.hit_alerts = int(hit.sum())
    counts.pa_tp = int((pa_pred & truth).sum())
    counts.pa_fp = int((pa_pred & ~truth).sum())
    counts.pa_fn = int((~pa_pred & truth).sum())
    return counts
