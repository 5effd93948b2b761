"""`sentinel-bench pipeline` runs against the real broker and reports the promised keys with real numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sentinel import codec
from sentinel.events import TelemetrySample
from sentinel_bench.pipeline import group_rates
from sentinel_models import persistence
from sentinel_models.hazard import fit
from tests.test_hazard import _synthetic


def test_bench_pipeline_reports_rates_latency_and_state_size(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The detector as shipped: a trained model loaded (a small synthetic one here; the bench's default trains
    the real one on first use, minutes), every rule on, and the JSON says so."""
    model = persistence.save(fit(_synthetic(), horizon_s=3600.0, target_precision=0.95), tmp_path, "m1", "abc",
                             "synthetic")
    result = subprocess.run([sys.executable, "-m", "sentinel_bench.cli", "pipeline", "--broker", kafka_bootstrap,
                             "--messages", "3000", "--nodes", "100", "--model", str(model), "--json"],
                            capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(result.stdout)
    for key in ("bare_msgs_per_s", "detector_msgs_per_s", "ratio", "two_process_msgs_per_s", "latency_p99_s",
                "bytes_per_gpu"):
        assert data[key] is not None and data[key] > 0, key
    assert data["detector_messages"] == 3000 and data["two_process_messages"] == 3000
    assert data["latency_samples"] > 0 and data["latency_p50_s"] <= data["latency_p99_s"]
    assert data["features"]["hazard_model"] == "m1" and data["features"]["peer_comparison"] is True
    assert data["two_process_speedup"] > 0 and data["two_process_span_msgs_per_s"] > 0
    assert data["cpu_us_per_msg"]["one_process"] > 0 and data["cpu_us_per_msg"]["two_processes"] > 0
    assert data["features"]["host_anomaly"] is True and data["cpus"] >= 1
    assert data["warm_samples_per_node"] == 61
    assert data["nodes_per_job"] == 16  # peer comparison has peers: it runs in the timed detector
    before, after = data["bare_runs_msgs_per_s"]  # the baseline brackets the detector's run (A-B-A)
    assert before > 0 and after > 0 and abs(data["bare_msgs_per_s"] - (before + after) / 2) <= 1
    assert data["crc32c"] is True  # a dependency: kafka-python's pure-Python CRC-32C halved the consume rate
    assert "bench: producing" in result.stderr  # progress goes to stderr, results to stdout


def test_group_rate_counts_only_while_every_member_is_busy() -> None:
    """Member b joins a second late and a finishes its partitions first: while both work the group does
    1,000 + 1,000 messages a second; first-to-last divides by the stragglers' time as well."""
    a = {"count": 3000, "first": 0.0, "last": 3.0, "timeline": [[0.0, 0], [1.0, 1000], [2.0, 2000], [3.0, 3000]]}
    b = {"count": 3000, "first": 1.0, "last": 4.0, "timeline": [[1.0, 0], [2.5, 1500], [4.0, 3000]]}
    both, span = group_rates([a, b])
    assert both == 2000.0  # 2,000 messages from t=1 to t=3, interpolated inside b's step
    assert span == 1500.0  # 6,000 messages over 4 s
    idle = {"count": 0, "first": None, "last": None, "timeline": []}
    assert group_rates([a, idle]) == (1000.0, 1000.0)  # a member that got nothing: the span of the other


def test_the_detector_is_timed_with_full_windows_every_node_scored(tmp_path: Path) -> None:
    """What the bench times is a member's steady state: the windows hold a full minute and the model scored
    every node in the current slot, so the produced samples continue those series (later sample times)."""
    from sentinel.clock import ManualClock
    from sentinel.transport.memory import MemoryTransport
    from sentinel_bench.pipeline import WARM_S, detector_as_shipped, scratch_store, warm_up
    from sentinel_bench.pipeline_samples import messages

    model = persistence.save(fit(_synthetic(), horizon_s=3600.0, target_precision=0.95), tmp_path, "m1", "abc",
                             "synthetic")
    detector = detector_as_shipped(MemoryTransport(), scratch_store(str(tmp_path)), str(model), ManualClock(), "warm")
    warm_up(detector, 20)
    assert len(detector.windows) == 20 and detector.samples_seen == 0
    assert all(w.count == WARM_S and w.count >= w.size for w in detector.windows.values())
    assert detector.hazard is not None and set(detector.hazard.last_scored) == set(detector.windows)
    last = max(w.last_ts for w in detector.windows.values())
    first_timed = codec.decode_as(messages(1, 20, first=WARM_S * 20)[0], TelemetrySample)
    assert first_timed.ts > last
    assert first_timed.jobs == ["job-0"]  # node 0 runs job-0 with nodes 1..15: peer comparison has its peers
    assert sorted(len(nodes) for nodes in detector.peers.members.values()) == [4, 16]
