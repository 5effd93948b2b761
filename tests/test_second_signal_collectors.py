"""The second physical signals of a link fault, as the collectors read them (issue 36): per-link NVLink state and
CRC data errors, and the PCIe link's current and maximum generation and width, through pynvml's real calls on
the fake NVML library and through dcgm-exporter's field names."""

from __future__ import annotations

import pynvml

from sentinel import codec
from sentinel.events import TelemetrySample
from sentinel.testing import FakeNvml, healthy_fields
from sentinel_collectors.dcgm import DcgmCollector
from sentinel_collectors.nvml import NvmlCollector


def _fake() -> FakeNvml:
    fake = FakeNvml(2)
    for gpu in fake.gpus:
        gpu.fields = healthy_fields()
    return fake


def test_nvml_reads_link_state_crc_data_errors_and_the_pcie_link_as_trained() -> None:
    fake = _fake()
    gpu = fake.gpus[1]
    gpu.nvlink_down = {3}
    gpu.fields[pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L3] = 17
    gpu.fields[pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L3] = 4
    gpu.fields[pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L3] = 2
    gpu.pcie_width, gpu.pcie_gen = 8, 4  # downtrained from x16 Gen5
    readings = NvmlCollector(fake, node="n1").read()
    link3 = readings[1].nvlinks[3]
    assert (link3.active, link3.crc_data_errors, link3.replay_errors, link3.recovery_errors) == (False, 17, 4, 2)
    assert all(link.active for link in readings[1].nvlinks if link.link != 3)
    assert all(link.active for link in readings[0].nvlinks)
    ours = readings[1]
    pcie = (ours.pcie_link_gen, ours.pcie_link_gen_max, ours.pcie_link_width, ours.pcie_link_width_max)
    assert pcie == (4, 5, 8, 16)
    assert (readings[0].pcie_link_width, readings[0].pcie_link_width_max) == (16, 16)
    sample = TelemetrySample(node="n1", ts=1.0, gpus=readings)
    assert codec.decode(codec.encode(sample)) == sample


def test_nvml_without_link_state_or_pcie_queries_leaves_them_unknown() -> None:
    fake = _fake()
    for gpu in fake.gpus:
        gpu.unsupported = {"nvmlDeviceGetNvLinkState", "nvmlDeviceGetCurrPcieLinkWidth",
                           "nvmlDeviceGetMaxPcieLinkGeneration"}
    reading = NvmlCollector(fake, node="n1").read()[0]
    assert all(link.active is None for link in reading.nvlinks) and len(reading.nvlinks) == 12
    assert reading.pcie_link_width is None and reading.pcie_link_gen_max is None
    assert (reading.pcie_link_gen, reading.pcie_link_width_max) == (5, 16)


SCRAPE = """\
# TYPE DCGM_FI_DEV_PCIE_LINK_GEN gauge
DCGM_FI_DEV_PCIE_LINK_GEN{gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0"} 5
# TYPE DCGM_FI_DEV_PCIE_MAX_LINK_GEN gauge
DCGM_FI_DEV_PCIE_MAX_LINK_GEN{gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0"} 5
# TYPE DCGM_FI_DEV_PCIE_LINK_WIDTH gauge
DCGM_FI_DEV_PCIE_LINK_WIDTH{gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0"} 8
# TYPE DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH gauge
DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH{gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0"} 16
# TYPE DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L2 counter
DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L2{gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0"} 11
# TYPE DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L2 counter
DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L2{gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0"} 3
# TYPE DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L4_TOTAL counter
DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_L4_TOTAL{gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0"} 6
"""


def test_dcgm_exporter_fields_give_the_pcie_link_and_crc_data_errors() -> None:
    reading = DcgmCollector("http://unused", fetch=lambda url, timeout: SCRAPE).read()[0]
    assert (reading.pcie_link_gen, reading.pcie_link_gen_max, reading.pcie_link_width,
            reading.pcie_link_width_max) == (5, 5, 8, 16)
    links = [(link.link, link.crc_data_errors, link.replay_errors) for link in reading.nvlinks]
    assert links == [(2, 11, 3), (4, 6, None)]
    assert "pcie_link_width" not in reading.deltas  # a state, not a counter


def test_dcgm_blank_or_out_of_range_link_values_stay_unknown() -> None:
    labels = '{gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0"}'
    text = SCRAPE.replace("} 8\n", "} 2147483632\n").replace(f"MAX_LINK_GEN{labels} 5", f"MAX_LINK_GEN{labels} 99")
    reading = DcgmCollector("http://unused", fetch=lambda url, timeout: text).read()[0]
    assert reading.pcie_link_width is None and reading.pcie_link_gen_max is None and reading.pcie_link_gen == 5
