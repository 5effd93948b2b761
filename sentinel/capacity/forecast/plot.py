"""The forecast report as a PNG (matplotlib, the optional ``plot`` extra)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from sentinel.errors import SentinelError


def plot_report(report: dict[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SentinelError("--plot needs matplotlib: pip install 'sentinel-gpu[plot]'") from None
    fc, hist = report["forecast"], report["history"]
    if not fc:
        raise SentinelError("nothing to plot: no load bins recorded yet")
    targets = [t for t in ("running_gpus", "pending_gpus", "submissions") if t in fc]
    fig, axes = plt.subplots(len(targets), 1, figsize=(8, 2.4 * len(targets)), sharex=True, squeeze=False)

    def when(values: list[float]) -> list[datetime]:
        return [datetime.fromtimestamp(v, UTC) for v in values]

    for ax, target in zip(axes[:, 0], targets, strict=True):
        points = fc[target]
        ax.plot(when(hist.get("ts", [])), hist.get(target, []), color="0.3", label="history")
        x = when([p["ts"] for p in points])
        ax.plot(x, [p["point"] for p in points], color="tab:blue", label="forecast (p50)")
        ax.fill_between(x, [p["lo"] for p in points], [p["hi"] for p in points], color="tab:blue", alpha=0.2,
                        label="p10-p90 (80% interval)")
        if target == "running_gpus" and report.get("outlook"):
            ax.plot(x, [o["available_gpus"] for o in report["outlook"]], color="tab:red", linestyle="--",
                    label="healthy - expected loss")
        caps = [(t, c) for t, c in zip(hist.get("ts", []), hist.get("total_gpus", []), strict=False)
                if math.isfinite(c)]
        if target == "running_gpus" and caps:  # capacity as it was in each bin, not today's across history
            ax.step(when([t for t, _ in caps]), [c for _, c in caps], where="post", color="0.6", linestyle=":",
                    label="capacity")
        ax.axvline(datetime.fromtimestamp(report["as_of"], UTC), color="0.2", linewidth=0.8, label="now")
        ax.set_ylabel(target.replace("_", " "))
        ax.legend(loc="upper left", fontsize=7)
    axes[0, 0].set_title(f"partition {report['partition']}: forecast ({report['method']}; inputs: "
                         f"{report.get('inputs', 'aggregate load bins')})", fontsize=9)
    axes[-1, 0].set_xlabel("time (UTC)")
    fig.autofmt_xdate()
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=90)
    except OSError as exc:
        raise SentinelError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
