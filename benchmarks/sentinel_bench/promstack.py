"""What users run today, for ``sentinel-bench alerting``: a real Prometheus scraping dcgm-exporter-style
endpoints with static-threshold alert rules.

- ``Exporter`` serves one /metrics per node (``/nodes/<node>/metrics``) in dcgm-exporter's format (field names
  and labels as in dcgm-exporter's output; InfiniBand port counters as node_exporter's infiniband collector
  names them), rendered from the same ``TelemetrySample`` and Xid events Sentinel receives.
- ``baseline_rules`` are the thresholds existing tools use (domain.md and DCGM's hardware limits), written in
  simulated time and scaled by the benchmark's speed-up so both systems live on the same clock.
- ``Prometheus`` runs the Debian ``prometheus`` binary on a free port with a temporary TSDB.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sentinel.errors import SentinelError
from sentinel.events import GpuState, TelemetrySample

# AWS EKS node-health Xids (domain.md): the static list an Xid alert fires on.
EKS_XIDS = (46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158)
NVLINK_BITS_PER_S = 18 * 25e9 * 8  # H100: 18 links x 25 GB/s per direction, for the bit error rate


def baseline_rules(speedup: float) -> dict[str, Any]:
    """Alert rules as existing tools set them; windows in simulated seconds, divided by ``speedup``. Prometheus
    computes ``rate()`` per wall second, and a wall second holds ``speedup`` simulated ones: rates are divided
    by ``speedup`` to be per simulated second before the tools' limits apply."""

    def window(sim_s: float) -> str:
        return f"{max(round(sim_s / speedup * 1000), 1)}ms"

    xid = " or ".join(f"DCGM_FI_DEV_XID_ERRORS == {x}" for x in EKS_XIDS)
    rules = [
        ("GpuXidCritical", xid),  # EKS node-health Xid list; the value is the last Xid (it never resets)
        ("GpuEccDbe", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0"),  # Azure healthagent: DBE volatile > 0 error
        ("GpuRowRemapFailure", "DCGM_FI_DEV_ROW_REMAP_FAILURE != 0"),  # Azure healthagent: error
        ("GpuRowRemapPending", "DCGM_FI_DEV_ROW_REMAP_PENDING > 0"),  # Azure: retired pages pending > 0 warn
        ("GpuTempHigh", "DCGM_FI_DEV_GPU_TEMP > 93"),  # Azure healthagent: GPU temperature > 93 C warn
        # DCGM hardware limits: 8 PCIe replays per minute; NVLink CRC errors matter from 100 per second; Azure:
        # NVLink effective bit error rate > 1e-6 (CRC flit errors per link bit, a generous reading)
        ("GpuPcieReplayRate", f"rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[{window(60)}]) / {speedup} * 60 > 8"),
        ("GpuNvlinkCrcRate",
         f"rate(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[{window(60)}]) / {speedup} > 100"),
        ("GpuNvlinkBer", f"rate(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[{window(60)}]) / {speedup}"
                         f" / {NVLINK_BITS_PER_S:g} > 1e-6"),
        # NVSentinel: any link_downed increase fatal; symbol errors > 10/s and link error recovery > 5/min
        ("IbLinkDowned", f"increase(node_infiniband_link_downed_total[{window(60)}]) > 0"),
        ("IbSymbolErrors", f"rate(node_infiniband_symbol_error_total[{window(60)}]) / {speedup} > 10"),
        ("IbLinkErrorRecovery", f"increase(node_infiniband_link_error_recovery_total[{window(60)}]) > 5"),
    ]
    return {"groups": [{"name": "static-thresholds", "rules": [
        {"alert": name, "expr": expr, "labels": {"severity": "warning"}} for name, expr in rules]}]}


GPU_FIELDS = (  # (DCGM field, TYPE, GpuReading attribute)
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "temp_c"), ("DCGM_FI_DEV_POWER_USAGE", "gauge", "power_w"),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "sm_clock_mhz"), ("DCGM_FI_DEV_GPU_UTIL", "gauge", "util_gpu_pct"),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "throttle_reasons"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "ecc_sbe_volatile"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "ecc_dbe_volatile"),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "row_remap_pending"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "row_remap_failure"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "pcie_replay"),
)
IB_FIELDS = (("node_infiniband_symbol_error_total", "symbol_error"),
             ("node_infiniband_link_error_recovery_total", "link_error_recovery"),
             ("node_infiniband_link_downed_total", "link_downed"))


def exposition(sample: TelemetrySample, last_xid: dict[int, int], model: str = "NVIDIA H100 80GB HBM3") -> str:
    """One node's scrape as dcgm-exporter (and node_exporter for InfiniBand) would write it. A lost GPU keeps
    only its last-Xid row, as an exporter that can no longer read the GPU still holds that field."""
    rows: dict[str, list[str]] = {}
    types: dict[str, str] = {"DCGM_FI_DEV_XID_ERRORS": "gauge", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL":
                             "counter"}
    for gpu in sample.gpus:
        labels = (f'gpu="{gpu.index}",UUID="GPU-{sample.node}-{gpu.index}",device="nvidia{gpu.index}",'
                  f'modelName="{model}",Hostname="{sample.node}"')
        rows.setdefault("DCGM_FI_DEV_XID_ERRORS", []).append(f"{{{labels}}} {last_xid.get(gpu.index, 0)}")
        if gpu.state is GpuState.LOST:
            continue
        for field, kind, attr in GPU_FIELDS:
            value = getattr(gpu, attr)
            if value is not None:
                types[field] = kind
                rows.setdefault(field, []).append(f"{{{labels}}} {float(value):g}")
        crc = sum(link.crc_errors or 0 for link in gpu.nvlinks)
        rows.setdefault("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", []).append(f"{{{labels}}} {crc}")
    for nic in sample.nics:
        device, _, port = nic.name.partition("/")
        for field, counter in IB_FIELDS:
            if counter in nic.counters:
                types[field] = "counter"
                rows.setdefault(field, []).append(f'{{device="{device}",port="{port or 1}"}} {nic.counters[counter]}')
    lines = []
    for field, values in rows.items():
        lines += [f"# TYPE {field} {types[field]}"] + [field + v for v in values]
    return "\n".join(lines) + "\n"


class Exporter:
    """An HTTP server with one /metrics per node; ``publish`` swaps in a whole step at once."""

    def __init__(self) -> None:
        self.pages: dict[str, bytes] = {}
        pages = self.pages

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                parts = self.path.strip("/").split("/")
                body = pages.get(parts[1]) if len(parts) == 3 and parts[0] == "nodes" else None
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def publish(self, pages: dict[str, str]) -> None:
        self.pages.update({node: text.encode() for node, text in pages.items()})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Prometheus:
    """The real Prometheus, scraping every node's endpoint every ``interval_s`` and evaluating ``rules``."""

    def __init__(self, exporter_port: int, nodes: list[str], rules: dict[str, Any], interval_s: float) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise SentinelError("prometheus is not installed (Debian: apt-get install prometheus)")
        self.dir = tempfile.TemporaryDirectory(prefix="sentinel-bench-prom-")
        root = Path(self.dir.name)
        interval = f"{round(interval_s * 1000)}ms"
        (root / "rules.yml").write_text(json.dumps(rules))  # JSON is YAML
        targets = [{"targets": [f"127.0.0.1:{exporter_port}"],
                    "labels": {"node": n, "__metrics_path__": f"/nodes/{n}/metrics"}} for n in nodes]
        config = {"global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
                  "rule_files": [str(root / "rules.yml")],
                  "scrape_configs": [{"job_name": "dcgm", "static_configs": targets}]}
        (root / "prometheus.yml").write_text(json.dumps(config))
        self.port = free_port()
        self.log = (root / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    def wait_scraping(self, targets: int, timeout_s: float = 30.0) -> None:
        """Return once every target has been scraped successfully."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SentinelError(f"prometheus exited with {self.proc.returncode}; log: {self.log.name}")
            try:
                up = self.api("/api/v1/query", query="sum(up)")["data"]["result"]
                if up and float(up[0]["value"][1]) >= targets:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SentinelError(f"prometheus did not scrape all {targets} targets within {timeout_s:.0f} s")

    def firing(self, since_wall: float) -> list[tuple[str, str, float]]:
        """Every evaluation at which an alert was firing: (alert, node, wall time), from the ALERTS series."""
        span = max(int(time.time() - since_wall) + 2, 1)
        result = self.api("/api/v1/query", query=f'ALERTS{{alertstate="firing"}}[{span}s]')["data"]["result"]
        return [(s["metric"]["alertname"], s["metric"].get("node", ""), float(ts))
                for s in result for ts, _ in s["values"]]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()
        self.dir.cleanup()
