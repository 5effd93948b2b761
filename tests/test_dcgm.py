"""The dcgm-exporter collector against a real local HTTP server serving recorded and hand-written exposition text.

The recorded text is dcgm_exporter_scrape_samples.txt in the shared data dir: three fragments pasted in public issues by
three exporter versions. Its ``## source:`` lines are exposition comments (the format ignores any ``#`` line that is
not HELP or TYPE, and prometheus_client's parser agrees), so each fragment is served verbatim, one per test:
served together they would put three different GPUs at index 0.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sentinel import codec
from sentinel.errors import CollectorError
from sentinel.events import TelemetrySample
from sentinel_collectors import dcgm
from sentinel_collectors.dcgm import DcgmCollector

MIB = 2**20
LABELS = 'gpu="{i}",UUID="GPU-{i}",pci_bus_id="00000000:{i}8:00.0",device="nvidia{i}",modelName="NVIDIA H100 80GB HBM3"'


@dataclass
class Exporter:
    url: str = ""
    body: str = ""
    status: int = 200


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    """A real HTTP server on 127.0.0.1 that serves ``body`` with ``status``; both can change between reads."""
    state = Exporter()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = state.body.encode()
            self.send_response(state.status)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    yield state
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _fragments(data_dir: Path) -> dict[str, str]:
    """The data file split at its ``## source:`` lines, keyed by the issue it came from."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in (data_dir / "dcgm_exporter_scrape_samples.txt").read_text().splitlines(keepends=True):
        if line.startswith("## source:"):
            current = out.setdefault(line.split("github.com/")[1].split()[0], [])
        if current is not None:
            current.append(line)
    return {source: "".join(lines) for source, lines in out.items()}


def _in_file(text: str, metric: str, gpu: int) -> str:
    """The value written on ``metric``'s line for ``gpu``, read from the text itself (the test's oracle)."""
    match = re.search(rf'^{metric}{{gpu="{gpu}",[^}}]*}} (\S+)$', text, re.MULTILINE)
    assert match, f"{metric} for gpu {gpu} not in the data file"
    return match.group(1)


def _read(exporter: Exporter, body: str) -> list:
    exporter.body = body
    return DcgmCollector(exporter.url).read()


def test_the_v100_fragment_gives_four_gpus_with_identity_power_limit_and_pcie_replay(
    exporter: Exporter, data_dir: Path
) -> None:
    text = _fragments(data_dir)["NVIDIA/dcgm-exporter/issues/250"]
    readings = _read(exporter, text)
    assert [r.index for r in readings] == [0, 1, 2, 3]
    assert readings[2].uuid == "GPU-a9079f15-493e-6c1c-c78c-73ec2b840cba"
    assert {r.model for r in readings} == {"Tesla V100-SXM2-32GB"}
    assert {r.pci_bus_id for r in readings} == {""}  # this exporter version had no pci_bus_id label
    assert _in_file(text, "DCGM_FI_DEV_POWER_MGMT_LIMIT", 3) == "300.000000"
    assert [r.power_limit_w for r in readings] == [None, None, 300.0, 300.0]  # the paste starts at gpu 2
    assert _in_file(text, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 1) == "0"
    assert [r.pcie_replay for r in readings] == [0, 0, 0, 0]
    assert readings[0].util_gpu_pct == 0.0 and readings[1].util_gpu_pct is None
    assert all(r.deltas == {} for r in readings)  # first read: a baseline, no deltas


def test_the_a100_fragment_gives_framebuffer_bytes_and_ignores_xid_and_nvlink_bandwidth(
    exporter: Exporter, data_dir: Path
) -> None:
    text = _fragments(data_dir)["NVIDIA/gpu-operator/issues/467"]
    (gpu,) = _read(exporter, text)
    assert (gpu.index, gpu.uuid, gpu.model) == (0, "GPU-c89b14a3-ce7c-6725-8424-b55d37d9c332", "NVIDIA A100 80GB PCIe")
    used, free = int(_in_file(text, "DCGM_FI_DEV_FB_USED", 0)), int(_in_file(text, "DCGM_FI_DEV_FB_FREE", 0))
    assert (used, free) == (741, 80328)
    assert gpu.mem_used_bytes == 741 * MIB and gpu.mem_total_bytes == (741 + 80328) * MIB
    assert "DCGM_FI_DEV_XID_ERRORS" in text and "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" in text
    assert gpu.nvlinks == [] and gpu.temp_c is None and gpu.pcie_replay is None


def test_the_oldest_fragment_with_spaces_between_labels_still_maps(exporter: Exporter, data_dir: Path) -> None:
    text = _fragments(data_dir)["NVIDIA/gpu-monitoring-tools/issues/104"]
    (gpu,) = _read(exporter, text)
    assert gpu.uuid == "GPU-c37c741b-4eaf-2ec3-2dc8-e64ad253b713" and gpu.model == ""
    assert _in_file(text, "DCGM_FI_DEV_GPU_TEMP", 0) == "0" and gpu.temp_c == 0.0


def test_the_whole_data_file_is_valid_exposition_including_its_double_hash_lines(
    exporter: Exporter, data_dir: Path
) -> None:
    readings = _read(exporter, (data_dir / "dcgm_exporter_scrape_samples.txt").read_text())
    assert [r.index for r in readings] == [0, 1, 2, 3]


FULL = "\n".join(
    [
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
        *(f'DCGM_FI_DEV_GPU_TEMP{{{LABELS.format(i=i)},Hostname="n1"}} {40 + i}' for i in range(2)),
        f"DCGM_FI_DEV_MEMORY_TEMP{{{LABELS.format(i=1)}}} 51",
        f"DCGM_FI_DEV_POWER_USAGE{{{LABELS.format(i=1)}}} 612.3456789",
        f"DCGM_FI_DEV_POWER_MGMT_LIMIT{{{LABELS.format(i=1)}}} 700.000000",
        f"DCGM_FI_DEV_SM_CLOCK{{{LABELS.format(i=1)}}} 1980",
        f"DCGM_FI_DEV_MEM_CLOCK{{{LABELS.format(i=1)}}} 2619",
        f"DCGM_FI_DEV_GPU_UTIL{{{LABELS.format(i=1)}}} 97",
        f"DCGM_FI_DEV_MEM_COPY_UTIL{{{LABELS.format(i=1)}}} 41",
        f"DCGM_FI_DEV_FAN_SPEED{{{LABELS.format(i=1)}}} 30",
        f"DCGM_FI_DEV_PSTATE{{{LABELS.format(i=1)}}} 0",
        f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{LABELS.format(i=1)}}} 232",
        f"DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION{{{LABELS.format(i=1)}}} 2",
        "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter",
        f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{LABELS.format(i=1)}}} 12",
        f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{LABELS.format(i=1)}}} 1",
        f"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{{{LABELS.format(i=1)}}} 120",
        f"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL{{{LABELS.format(i=1)}}} 3",
        f"DCGM_FI_DEV_RETIRED_SBE{{{LABELS.format(i=1)}}} 4",
        f"DCGM_FI_DEV_RETIRED_DBE{{{LABELS.format(i=1)}}} 2",
        f"DCGM_FI_DEV_RETIRED_PENDING{{{LABELS.format(i=1)}}} 1",
        f"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{{{LABELS.format(i=1)}}} 5",
        f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{LABELS.format(i=1)}}} 6",
        f"DCGM_FI_DEV_ROW_REMAP_PENDING{{{LABELS.format(i=1)}}} 1",
        f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{LABELS.format(i=1)}}} 0",
        f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{LABELS.format(i=1)}}} 9",
        f"DCGM_FI_DEV_FB_USED{{{LABELS.format(i=1)}}} 1000",
        f"DCGM_FI_DEV_FB_FREE{{{LABELS.format(i=1)}}} 79000",
        f"DCGM_FI_DEV_FB_RESERVED{{{LABELS.format(i=1)}}} 1000",
        f"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0{{{LABELS.format(i=1)}}} 3",
        f"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0{{{LABELS.format(i=1)}}} 4",
        f"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L17{{{LABELS.format(i=1)}}} 5",
        f"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{{{LABELS.format(i=1)}}} 99",  # GPU-wide: no link to put it on
        # a link-entity row (newer exporters): the link comes from the nvlink label
        'DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL{nvlink="3",gpu="1",gpu_uuid="GPU-1"} 8',
        'DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL{nvlink="3",nvswitch="0"} 1000',  # a switch port: not a GPU
        f'DCGM_FI_DEV_FB_USED{{{LABELS.format(i=1)},GPU_I_PROFILE="1g.10gb",GPU_I_ID="7"}} 5',  # a MIG slice
        f"DCGM_FI_DEV_XID_ERRORS{{{LABELS.format(i=1)}}} 79",
        f"DCGM_FI_PROF_SM_ACTIVE{{{LABELS.format(i=1)}}} 0.5",
        'dcgm_exporter_build_info{version="4.1.1"} 1',
        "",
    ]
)


def test_every_mapped_field_arrives_in_units_and_survives_the_wire_codec(exporter: Exporter) -> None:
    readings = _read(exporter, FULL)
    assert [r.index for r in readings] == [0, 1]
    gpu = readings[1]
    assert (gpu.uuid, gpu.pci_bus_id, gpu.model) == ("GPU-1", "00000000:18:00.0", "NVIDIA H100 80GB HBM3")
    assert (gpu.temp_c, gpu.mem_temp_c, gpu.power_w, gpu.power_limit_w) == (41.0, 51.0, 612.346, 700.0)
    assert (gpu.sm_clock_mhz, gpu.mem_clock_mhz, gpu.util_gpu_pct, gpu.util_mem_pct) == (1980, 2619, 97, 41)
    assert (gpu.fan_pct, gpu.pstate, gpu.throttle_reasons, gpu.recovery_action) == (30.0, 0, 0xE8, 2)
    ecc = (gpu.ecc_sbe_volatile, gpu.ecc_dbe_volatile, gpu.ecc_sbe_aggregate, gpu.ecc_dbe_aggregate)
    assert ecc == (12, 1, 120, 3)
    assert (gpu.retired_pages_sbe, gpu.retired_pages_dbe, gpu.retired_pages_pending) == (4, 2, 1)
    assert (gpu.row_remap_correctable, gpu.row_remap_uncorrectable) == (5, 6)
    assert gpu.row_remap_pending is True and gpu.row_remap_failure is False and gpu.pcie_replay == 9
    assert gpu.mem_used_bytes == 1000 * MIB and gpu.mem_total_bytes == 81000 * MIB  # used + free + reserved
    assert [(link.link, link.crc_errors, link.replay_errors, link.recovery_errors) for link in gpu.nvlinks] == [
        (0, 3, 4, None),
        (3, None, 8, None),
        (17, None, None, 5),
    ]
    assert readings[0].temp_c == 40.0 and readings[0].ecc_sbe_volatile is None
    sample = TelemetrySample(node="n1", ts=1.0, gpus=readings)
    assert codec.decode(codec.encode(sample)) == sample  # within every constraint of the wire schema


def test_xid_errors_is_ignored_because_it_is_the_last_xid_and_never_resets(exporter: Exporter) -> None:
    base = f"DCGM_FI_DEV_GPU_TEMP{{{LABELS.format(i=0)}}} 40\n"
    with_xid = base + f"DCGM_FI_DEV_XID_ERRORS{{{LABELS.format(i=0)}}} 79\n"
    assert _read(exporter, with_xid) == _read(exporter, base)
    assert _read(exporter, f"DCGM_FI_DEV_XID_ERRORS{{{LABELS.format(i=0)}}} 79\n") == []  # no mapped field, no GPU


def _counters(sbe: int | str, replay: int, index: int = 0, uuid: str = "GPU-0") -> str:
    labels = f'gpu="{index}",UUID="{uuid}"' if uuid else f'gpu="{index}"'
    return (
        "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter\n"
        f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{labels}}} {sbe}\n"
        "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter\n"
        f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{labels}}} {replay}\n"
    )


def test_counter_deltas_follow_the_previous_scrape_and_a_reset_gives_no_delta(exporter: Exporter) -> None:
    collector = DcgmCollector(exporter.url)
    exporter.body = _counters(5, 10)
    assert collector.read()[0].deltas == {}
    exporter.body = _counters(7, 10)
    assert collector.read()[0].deltas == {"ecc_sbe_volatile": 2, "pcie_replay": 0}
    exporter.body = _counters(1, 12)  # the driver reloaded and the ECC counter restarted
    third = collector.read()[0]
    assert third.ecc_sbe_volatile == 1 and third.deltas == {"pcie_replay": 2}
    exporter.body = _counters(4, 12)
    assert collector.read()[0].deltas == {"ecc_sbe_volatile": 3, "pcie_replay": 0}


def test_deltas_follow_the_gpu_uuid_when_its_index_changes_and_the_index_when_there_is_no_uuid(
    exporter: Exporter,
) -> None:
    collector = DcgmCollector(exporter.url)
    exporter.body = _counters(5, 10, index=0, uuid="GPU-a") + _counters(50, 0, index=1, uuid="")
    collector.read()
    exporter.body = _counters(6, 10, index=1, uuid="GPU-a")  # re-enumerated: same GPU, new index
    assert collector.read()[0].deltas == {"ecc_sbe_volatile": 1, "pcie_replay": 0}
    exporter.body = _counters(53, 1, index=1, uuid="")
    assert collector.read()[0].deltas == {"ecc_sbe_volatile": 3, "pcie_replay": 1}


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("DCGM_FI_DEV_GPU_TEMP{{{}}} NaN", "temp_c"),
        ("DCGM_FI_DEV_POWER_USAGE{{{}}} +Inf", "power_w"),
        ("DCGM_FI_DEV_POWER_USAGE{{{}}} 140737488355330", "power_w"),  # DCGM_FP64_NOT_SUPPORTED (blank + 2)
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{}}} NaN", "ecc_dbe_volatile"),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{}}} -1", "ecc_dbe_volatile"),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{}}} 9223372036854775794", "ecc_dbe_volatile"),  # DCGM_INT64 blank + 2
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{}}} 2147483634", "ecc_dbe_volatile"),  # DCGM_INT32 blank + 2
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{}}} 1e30", "ecc_dbe_volatile"),  # past int64
        ("DCGM_FI_DEV_PSTATE{{{}}} 40", "pstate"),
        ("DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION{{{}}} 300", "recovery_action"),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE{{{}}} NaN", "row_remap_failure"),
        ("DCGM_FI_DEV_FB_USED{{{}}} -Inf", "mem_used_bytes"),
    ],
)
def test_a_value_that_cannot_be_trusted_stays_none_and_the_rest_of_the_gpu_is_read(
    exporter: Exporter, line: str, field: str
) -> None:
    (gpu,) = _read(exporter, line.format(LABELS.format(i=0)) + f"\nDCGM_FI_DEV_SM_CLOCK{{{LABELS.format(i=0)}}} 1410\n")
    assert getattr(gpu, field) is None and gpu.sm_clock_mhz == 1410
    assert gpu.deltas == {}


def test_a_nan_counter_gives_no_delta_and_the_next_good_read_counts_the_increase_across_the_gap(
    exporter: Exporter,
) -> None:
    collector = DcgmCollector(exporter.url)
    for body, expected in [
        (_counters(5, 1), {}),
        (_counters("NaN", 1), {"pcie_replay": 0}),
        (_counters(6, 1), {"ecc_sbe_volatile": 1, "pcie_replay": 0}),
    ]:
        exporter.body = body
        assert collector.read()[0].deltas == expected


def test_an_unreachable_port_is_a_collector_error_naming_the_url() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has nobody listening now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/metrics"
    with pytest.raises(CollectorError, match=re.escape(url)):
        DcgmCollector(url, timeout_s=1.0).read()


def test_an_exporter_that_does_not_answer_in_time_is_a_collector_error() -> None:
    with socket.socket() as sock:  # listens, never accepts: the connection opens, no response ever comes
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"
        with pytest.raises(CollectorError, match="timed out"):
            DcgmCollector(url, timeout_s=0.2).read()


def test_http_500_is_a_collector_error_naming_the_url_and_the_status(exporter: Exporter) -> None:
    exporter.status, exporter.body = 500, "DCGM not initialized\n"
    with pytest.raises(CollectorError, match=rf"{re.escape(exporter.url)}.*500"):
        DcgmCollector(exporter.url).read()


def test_a_body_the_parser_rejects_is_a_collector_error(exporter: Exporter) -> None:
    with pytest.raises(CollectorError, match="not exposition"):
        _read(exporter, "<html><body>404 page not found</body></html>\n")


def test_valid_exposition_without_dcgm_gpu_samples_is_an_empty_list(exporter: Exporter) -> None:
    assert _read(exporter, "") == []
    assert _read(exporter, "# TYPE node_load1 gauge\nnode_load1 0.5\n") == []
    assert _read(exporter, 'DCGM_FI_DEV_GPU_TEMP{gpu="GPU-x"} 40\nDCGM_FI_DEV_GPU_TEMP 41\n') == []  # no usable index


def test_a_body_past_the_size_cap_is_a_collector_error(exporter: Exporter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dcgm, "MAX_BODY_BYTES", 64)
    with pytest.raises(CollectorError, match="more than 64 bytes"):
        _read(exporter, FULL)


def test_the_scrape_never_goes_through_an_http_proxy_from_the_environment(
    exporter: Exporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # discard port: a scrape sent there would fail
    assert [r.index for r in _read(exporter, FULL)] == [0, 1]


def test_an_injected_fetch_replaces_http_and_its_os_errors_become_collector_errors() -> None:
    calls: list[tuple[str, float]] = []

    def fetch(url: str, timeout_s: float) -> str:
        calls.append((url, timeout_s))
        return f"DCGM_FI_DEV_GPU_TEMP{{{LABELS.format(i=0)}}} 40\n"

    assert DcgmCollector("http://node:9400/metrics", 0.5, fetch=fetch).read()[0].temp_c == 40.0
    assert calls == [("http://node:9400/metrics", 0.5)]

    def broken(url: str, timeout_s: float) -> str:
        raise ConnectionResetError("reset by peer")

    with pytest.raises(CollectorError, match="http://node:9400/metrics.*reset by peer"):
        DcgmCollector("http://node:9400/metrics", fetch=broken).read()
