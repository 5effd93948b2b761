"""Windowed per-GPU features: levels, slopes, counter rates, time since the last precursor event, and values
relative to the GPU's peers (the other GPUs of its node, which run the same job in lock-step).

Pure functions over named arrays in time order, exactly what ``NodeWindow.series`` returns for one node
(GPU fields shaped (T, G), node fields (T,)), or the same with a node axis after time for a whole fleet
at once (GPU fields (T, N, G), node fields (T, N); ``ts`` (T,) when the nodes share one time axis, as the
trainer's do, or (T, N) when each window has its own, as the detector's do). ``FEATURES`` is the column order; it is
stored with every model and checked when a model is loaded.

Counter rates survive resets (a driver reload or reboot starts the count again): as in ``sentinel.counters``,
what happened across a reset is unknown, so a step that goes backwards counts as no increase (never as a
negative or a huge one), and so does a missing reading (NaN).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np

from sentinel.counters import rate_per_h

FEATURES = (
    "node_temp_c",  # median over the node's GPUs of their levels (mean of the newest LEVEL_SAMPLES readings)
    # The three deviation columns are in C (per minute) and W as gpu_features gives them; DeviationBaseline
    # subtracts each GPU's own long-run deviation and FleetScale divides by the fleet's spread, so the model sees
    # them in units of "how unusual in this fleet", whatever its sensors' noise.
    "temp_dev_slope_per_min",  # slope over the window of the GPU's temperature minus its peers' median
    "temp_dev_excess",  # the GPU's level minus the median of the node's GPUs' levels, minus its own baseline
    "power_dev_excess",
    "clock_ratio",  # SM clock over the median of the node's GPUs (mean of the last 2 samples)
    "util_pct",
    "ecc_sbe_per_h",  # correctable ECC errors per hour over the window
    "ecc_sbe_recent_per_h",  # ... over the last quarter of the window
    "remap_pending",
    "pcie_replay_per_h",
    "pcie_replay_recent_per_h",
    "nvlink_crc_per_h",
    "nvlink_crc_recent_per_h",
    "nvlink_replay_per_h",  # NVLink replays plus recoveries per hour over the window
    "pcie_downtrained",  # the PCIe link runs below its maximum width now (1), at full width or unknown (0)
    "thermal_throttle_share",  # share of the window with a thermal clock-event reason
    "ib_symbol_error_per_h",  # node's InfiniBand ports, the same for every GPU of the node
    "ib_link_error_recovery_per_h",
    "xid_precursor_age_s",  # seconds since the GPU's last Xid 63/64, capped at XID_AGE_CAP_S
)
XID_AGE_CAP_S = 86_400.0
LEVEL_SAMPLES = 6  # levels (temperature, power, utilisation) average this many newest readings
THERMAL_MASK = 0x20 | 0x40  # NVML clock-event reasons: SW thermal, HW thermal
BASELINE_TAU_S = 6 * 3600.0  # time constant of a GPU's long-run deviation from its peers
_EXCESS = (FEATURES.index("temp_dev_excess"), FEATURES.index("power_dev_excess"))
_SLOPE = FEATURES.index("temp_dev_slope_per_min")
FLEET_TAU_S = 3600.0  # time constant of the fleet's spread of deviations
SPREAD_FLOOR = (0.25, 3.0)  # C, W: a fleet of perfect sensors does not make every tenth of a degree unusual
MAD_TO_SD = 1.4826


def slope_per_min(values: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Least-squares slope along axis 0 per minute, ignoring NaN readings (0 when fewer than 2 remain)."""
    t = ts - ts[-1]  # (T,), or (T, N): each stacked window on its own times
    t = t.reshape(t.shape + (1,) * (values.ndim - t.ndim))
    ok = ~np.isnan(values)
    n = ok.sum(axis=0)
    tt = np.where(ok, t, 0.0)
    vv = np.where(ok, values, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        t_mean = tt.sum(axis=0) / n
        v_mean = vv.sum(axis=0) / n
        cov = (np.where(ok, (t - t_mean) * (values - v_mean), 0.0)).sum(axis=0)
        var = (np.where(ok, (t - t_mean) ** 2, 0.0)).sum(axis=0)
        slope = cov / var * 60.0
    return np.where((n >= 2) & (var > 0), slope, 0.0)


def _peer_median(values: np.ndarray) -> np.ndarray:
    if not np.isnan(values).any():  # the common case; nanmedian is ~10x slower on small arrays
        return np.median(values, axis=-1, keepdims=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN node (every GPU lost) gives NaN
        return np.nanmedian(values, axis=-1, keepdims=True)


class DeviationBaseline:
    """Each GPU's long-run temperature and power deviation from its peers (an EWMA over scorings).

    Some healthy GPUs always run a few degrees and tens of watts above their peers (airflow, silicon); against
    their own baseline they are ordinary, while a GPU that starts to overheat leaves it. The first reading of a
    GPU is its baseline (so a detector restart does not make every warm GPU look new); later ones move it with
    time constant ``tau_s``. Shaped like the GPU axes of the features ((G,) for a node, (N, G) for a fleet).
    """

    def __init__(self, tau_s: float = BASELINE_TAU_S) -> None:
        self.tau_s = tau_s
        self.value: np.ndarray | None = None  # (..., G, 2): temperature, power
        self.ts = -np.inf

    def apply(self, feats: np.ndarray, ts: float) -> np.ndarray:
        """Move the baseline toward the deviations in ``feats`` (..., G, len(FEATURES)) read at ``ts``, then
        write each GPU's excess over it into the excess columns; returns ``feats``. Call it once per row: the
        excess columns hold the raw deviations until it does."""
        dev = feats[..., list(_EXCESS)]
        base = self.value
        if base is None or base.shape != dev.shape:
            grown = np.full(dev.shape, np.nan)  # GPUs seen for the first time have no baseline yet
            if base is not None and base.ndim == grown.ndim:
                sizes: list[tuple[int, int]] = list(zip(base.shape, grown.shape, strict=True))
                common = tuple(slice(0, min(a, b)) for a, b in sizes)
                grown[common] = base[common]
            base = grown
        alpha = 1.0 - np.exp(-max(ts - self.ts, 0.0) / self.tau_s) if np.isfinite(self.ts) else 1.0
        moved = np.where(np.isnan(base), dev, base + alpha * (dev - base))
        self.value = np.where(np.isnan(dev), base, moved)
        self.ts = ts
        feats[..., list(_EXCESS)] = dev - np.nan_to_num(self.value, nan=0.0)
        return feats


class FleetScale:
    """The fleet's spread of GPU deviations (temperature, power): an EWMA of the robust standard deviation (MAD)
    of the excess columns over the rows scored, so that the deviation features are in units of this fleet's own
    spread. A fleet with noisier sensors or more varied hardware gets a wider spread, and the same physical
    deviation counts for less there, as an operator would judge it. Apply after ``DeviationBaseline``."""

    def __init__(self, tau_s: float = FLEET_TAU_S) -> None:
        self.tau_s = tau_s
        self.value: np.ndarray | None = None  # (2,): temperature C, power W
        self.ts = -np.inf

    def apply(self, rows: np.ndarray, ts: float) -> np.ndarray:
        """Update the spread from ``rows`` (..., len(FEATURES)) read at ``ts`` and scale their deviation columns
        (and the temperature slope) by it, in place; returns ``rows``."""
        flat = rows.reshape(-1, rows.shape[-1])
        dev = flat[:, list(_EXCESS)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # no finite row: keep the old spread
            spread = np.nanmedian(np.abs(dev), axis=0) * MAD_TO_SD
        if np.isfinite(spread).all() and len(flat) >= 4:
            if self.value is None:
                self.value = spread
            else:
                alpha = 1.0 - np.exp(-max(ts - self.ts, 0.0) / self.tau_s)
                self.value = self.value + alpha * (spread - self.value)
            self.ts = ts
        scale = np.maximum(self.value if self.value is not None else np.zeros(2), SPREAD_FLOOR)
        rows[..., list(_EXCESS)] = rows[..., list(_EXCESS)] / scale
        rows[..., _SLOPE] = rows[..., _SLOPE] / scale[0]
        return rows


THERMAL_EVIDENCE = 6.0  # fleet spreads above its peers and its own baseline
ECC_ESCALATING_PER_H = 60.0  # correctable errors per hour over the window: ten in a 10-minute window
SYMBOL_ERRORS_PER_H = 120.0  # IBTA's 1e-12 bit-error-rate bound (NVSentinel's pre-failure line)


def any_physical_signal(rows: np.ndarray) -> np.ndarray:
    """Per row: does the GPU show any physical sign at all (recent correctable ECC, a pending remap or recent Xid
    63/64, recent PCIe replays or NVLink CRC errors, thermal slowdown, InfiniBand errors on its node, or a
    temperature above its peers and climbing)? A hazard score with none of these is the model's word alone:
    Sentinel keeps it as a metric, not as an alert to a person."""
    c = {name: rows[..., i] for i, name in enumerate(FEATURES)}
    with np.errstate(invalid="ignore"):
        return np.asarray((c["ecc_sbe_recent_per_h"] > 0) | (c["remap_pending"] > 0)
                          | (c["xid_precursor_age_s"] < XID_AGE_CAP_S) | (c["pcie_replay_recent_per_h"] > 0)
                          | (c["nvlink_crc_recent_per_h"] > 0) | (c["thermal_throttle_share"] > 0)
                          | (c["nvlink_replay_per_h"] > 0) | (c["pcie_downtrained"] > 0)
                          | (c["ib_symbol_error_per_h"] > 0) | (c["ib_link_error_recovery_per_h"] > 0)
                          | ((c["temp_dev_excess"] >= THERMAL_EVIDENCE / 2) & (c["temp_dev_slope_per_min"] > 0)))


def physical_evidence(rows: np.ndarray) -> np.ndarray:
    """Per row (..., len(FEATURES), after FleetScale): do two independent physical signals of the GPU (or its
    node's port) agree that it is failing? A healthy fleet shows any one of them every day (a burst of
    correctable errors, a remap, a warm slot, a marginal cable), so one alone never takes a node out of service:

    - HBM wearing out: correctable errors escalating (>= ECC_ESCALATING_PER_H, and still coming) while a row
      remap is pending or an Xid 63/64 was logged;
    - thermal runaway: hardware thermal slowdown on a GPU running far above its peers;
    - a failing InfiniBand link: symbol errors above the IBTA line and link error recoveries.

    NVLink and PCIe links drain through their own rules (``link_rules``), which count both signals in the window:
    a rate above zero here takes one link retrain during a CRC burst for two signals (with these terms in,
    llama3-mix showed 4 hazard-model false drains; not re-measured without them). A CRC or replay ramp alone
    looks the same whether it will fail or recover, and a link retrains once now and then: one signal alone
    alerts. A hazard finding without this evidence alerts."""
    c = {name: rows[..., i] for i, name in enumerate(FEATURES)}
    with np.errstate(invalid="ignore"):
        hbm = ((c["ecc_sbe_per_h"] >= ECC_ESCALATING_PER_H) & (c["ecc_sbe_recent_per_h"] > 0)
               & ((c["remap_pending"] > 0) | (c["xid_precursor_age_s"] < XID_AGE_CAP_S)))
        thermal = (c["thermal_throttle_share"] > 0) & (c["temp_dev_excess"] >= THERMAL_EVIDENCE)
        link = (c["ib_symbol_error_per_h"] > SYMBOL_ERRORS_PER_H) & (c["ib_link_error_recovery_per_h"] > 0)
        return np.asarray(hbm | thermal | link)


def gpu_features(series: Mapping[str, np.ndarray], xid_age_s: np.ndarray) -> np.ndarray:
    """The feature matrix (..., G, len(FEATURES)) of the window ``series`` (see the module docstring). The
    excess columns hold the raw deviations from peers until ``DeviationBaseline.apply`` subtracts a baseline."""
    ts = series["ts"]  # (T,): one time axis for every node; (T, N): each node's own (the detector's windows)
    temp, power, clock = series["temp_c"], series["power_w"], series["sm_clock_mhz"]
    gpus_shape = temp.shape[1:]
    quarter = max(temp.shape[0] // 4, 1)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a lost GPU's readings are all NaN
        # Levels are means of the last LEVEL_SAMPLES readings: one noisy reading must not look like a trend.
        last_temp = np.nanmean(temp[-LEVEL_SAMPLES:], axis=0)
        last_power = np.nanmean(power[-LEVEL_SAMPLES:], axis=0)
        last_util = np.nanmean(series["util_pct"][-LEVEL_SAMPLES:], axis=0)
        recent_clock = np.nanmean(clock[-2:], axis=0)
        clock_ratio = recent_clock / _peer_median(recent_clock)
    throttled = (series["throttle"] & THERMAL_MASK) != 0

    def node_rate(name: str) -> np.ndarray:
        return np.broadcast_to(rate_per_h(series[name], ts)[..., None], gpus_shape)

    columns = [
        # The node's level, not the GPU's own: a GPU that always runs warm shows in its deviation (measured
        # against its baseline), and a node whose cooling fails heats every peer.
        np.broadcast_to(_peer_median(last_temp), gpus_shape),
        slope_per_min(temp - _peer_median(temp), ts),  # a job-wide warm-up moves every peer: only drift counts
        last_temp - _peer_median(last_temp),
        last_power - _peer_median(last_power),
        np.nan_to_num(clock_ratio, nan=1.0, posinf=1.0, neginf=1.0),
        last_util,
        rate_per_h(series["ecc_sbe"], ts),
        rate_per_h(series["ecc_sbe"], ts, quarter),
        np.nan_to_num(series["remap_pending"][-1], nan=0.0),
        rate_per_h(series["pcie_replay"], ts),
        rate_per_h(series["pcie_replay"], ts, quarter),
        rate_per_h(series["nvlink_crc"], ts),
        rate_per_h(series["nvlink_crc"], ts, quarter),
        rate_per_h(series["nvlink_replay"], ts),
        np.nan_to_num(series["pcie_downtrained"][-1], nan=0.0),
        throttled.mean(axis=0),
        node_rate("ib_symbol_error"),
        node_rate("ib_link_error_recovery"),
        np.broadcast_to(xid_age_s, gpus_shape),
    ]
    return np.stack([np.asarray(c, dtype=np.float64) for c in columns], axis=-1)
