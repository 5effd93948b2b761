"""Does an alert's evidence name the metrics the operators named? (SMD's ``interpretation_label/`` folder.)

SMD ships, per machine, ``interpretation_label/<machine>.txt`` with lines ``start-end:d1,d2,...``: a labelled
test segment ``[start, end)`` and the 1-based numbers of the metrics that explain it (column ``d - 1``). For each
segment with a hit, the first hit alert's top metric (and top three) are checked against that list. Folders
without interpretation labels (ASD) simply get no evidence figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sentinel.errors import ValidationError

FOLDER = "interpretation_label"


@dataclass
class EvidenceCounts:
    judged: int = 0  # detected segments with an interpretation label
    top1: int = 0
    top3: int = 0

    def __add__(self, other: EvidenceCounts) -> EvidenceCounts:
        return EvidenceCounts(self.judged + other.judged, self.top1 + other.top1, self.top3 + other.top3)

    def metrics(self) -> dict[str, Any]:
        return {
            "segments_judged": self.judged,
            "top1_match": round(self.top1 / self.judged, 4) if self.judged else None,
            "top3_match": round(self.top3 / self.judged, 4) if self.judged else None,
        }


def read_interpretation(folder: Path, machine: str, columns: list[str]) -> list[tuple[int, int, set[str]]] | None:
    """The machine's labelled segments with their metric names, or None when the folder has no such file."""
    path = folder / FOLDER / f"{machine}.txt"
    if not path.is_file():
        return None
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            span, dims = line.split(":")
            start, end = (int(v) for v in span.split("-"))
            numbers = [int(d) for d in dims.split(",")]
            if not all(1 <= d <= len(columns) for d in numbers):
                raise ValueError("metric number out of range")
            names = {columns[d - 1] for d in numbers}
        except (ValueError, IndexError) as exc:
            raise ValidationError(f"{path}:{number}: expected 'start-end:dim,dim,...' with 1-based metric "
                                  f"numbers up to {len(columns)}, got {line!r}") from exc
        out.append((start, end, names))
    return out


def judge(alerts: list[dict[str, Any]], segments: list[tuple[int, int, set[str]]], horizon_rows: int
          ) -> EvidenceCounts:
    """Match each segment's first hit alert (``[start - H, end)``) against the segment's labelled metrics."""
    counts = EvidenceCounts()
    for start, end, names in segments:
        first = next((a for a in alerts if start - horizon_rows <= a["row"] < end), None)
        if first is None:
            continue
        top = [c["metric"] for c in first["metrics"]]
        counts.judged += 1
        counts.top1 += int(bool(top) and top[0] in names)
        counts.top3 += int(bool(set(top[:3]) & names))
    return counts
