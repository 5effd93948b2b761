"""The window vocabulary: which per-GPU and per-node fields the detector's windows keep, in which order.

On the floor below both users: the detector's ``NodeWindow`` stores readings in this layout and the trainer
(``models.training``) builds the same arrays from simulated fleets, so a feature means the same in both.
"""

from __future__ import annotations

# Per GPU, in this order in ``NodeWindow.gpu`` (axis 1).
# ``nvlink_replay``: replay plus recovery errors over the GPU's NVLinks (a counter); ``pcie_downtrained``: 1 when the
# PCIe link runs narrower than its maximum width, 0 when at full width, NaN when unknown.
GPU_FIELDS = ("temp_c", "power_w", "sm_clock_mhz", "util_pct", "ecc_sbe", "pcie_replay", "nvlink_crc",
              "nvlink_replay", "remap_pending", "pcie_downtrained")
# Per node, in this order in ``NodeWindow.node`` (axis 1): sample time and InfiniBand counters summed over ports.
NODE_FIELDS = ("ts", "ib_symbol_error", "ib_link_error_recovery", "ib_link_downed")
IB_COUNTERS = NODE_FIELDS[1:]
PRECURSOR_XIDS = frozenset({63, 64})  # row remap pending / failed to remap: the HBM is wearing out (catalog)
