"""Which findings reach a person: a pure grading of one finding against the node's recent findings.

A finding is evidence: it is stored, counted and shown in ``sentinel incident show``. It becomes an operator-facing
alert (its incident shows in the default ``sentinel incidents`` view, ``sentinel_node_alert`` is 1, the shipped
Prometheus rule fires) only when one of these holds (docs/alerts.md):

- it is critical or fatal: the hardware failed, or the policy is about to checkpoint and drain;
- it **repeats**: the same rule on the same component ``repeat`` times within ``alerts.repeat_window_s``
  (NVSentinel escalates NVLink errors only when they repeat on the same link within 24 h);
- it **persists**: the rule's own episode has lasted ``persist_s`` (its evidence's ``duration_s``);
- it is **corroborated**: a finding of another signal family on the same GPU (or on the node, for node-wide
  signals) within ``alerts.corroborate_s``, where at least one of the two is physical (the model and the job's
  peers corroborate a physical signal, not each other).

The controller grades each finding of an incident until the incident becomes an alert, so an incident (one node
episode) is one alert, however many findings it collects.
"""

from __future__ import annotations

from collections.abc import Sequence

from sentinel.config.alerts import AlertRuleConfig, AlertsConfig
from sentinel.events import Finding, Severity

# Signal families: two findings of one family are one signal seen twice (a successful row remap logs Xid 63 and
# sets the pending flag; both are the same HBM event), not two signals that agree.
FAMILY = {
    "gpu-lost": "bus", "ecc-dbe": "memory", "row-remap-failure": "memory", "row-remap-pending": "memory",
    "thermal-high": "thermal", "thermal-sustained": "thermal",
    "ib-link-downed": "infiniband", "ib-link-degraded": "infiniband", "nic-fatal": "infiniband",
    "pcie-replay-rate": "pcie", "nvlink-crc-rate": "nvlink", "nvswitch-sxid": "nvlink",
    "nvlink-link-degraded": "nvlink", "nvlink-link-failing": "nvlink",
    "pcie-link-degraded": "pcie", "pcie-link-failing": "pcie",
    "straggler-clock": "clock", "straggler-confirmed": "clock",
    "hazard-model": "model", "isolation-forest": "model", "peer-outlier": "peers", "host-anomaly": "host",
}
NOT_PHYSICAL = frozenset({"model", "peers", "host"})
# Xids by what they tell of (NVIDIA's Xid catalog, domain.md); the rest count as the GPU's own "xid" family.
XID_FAMILY = {**dict.fromkeys((48, 63, 64, 92, 94, 95), "memory"), **dict.fromkeys((74,), "nvlink"),
              **dict.fromkeys((79,), "bus"), **dict.fromkeys((119, 120), "firmware")}

# Defaults per rule, each with where it comes from. Counter warnings (PCIe replays, NVLink CRC, InfiniBand symbol
# errors) are bursts a healthy fleet shows every day: DCGM treats NVLink CRC below 100/s as a warning, NVSentinel
# escalates only repeats on the same link within 24 h; three in a day on one component is past what background
# bursts make (docs/alerts.md). A straggler that lasts 5 minutes costs a job more than a drain would (a power
# brake lasts 20-120 s). Model, anomaly, peer and host findings have no threshold an operator could check: they
# alert only when a physical signal agrees.
DEFAULT_RULES: dict[str, AlertRuleConfig] = {
    "pcie-replay-rate": AlertRuleConfig(repeat=3),
    "nvlink-crc-rate": AlertRuleConfig(repeat=3),
    "ib-link-degraded": AlertRuleConfig(repeat=3),
    "nvswitch-sxid": AlertRuleConfig(repeat=3),
    "nvlink-link-degraded": AlertRuleConfig(repeat=3),  # a healthy link retrains once now and then
    "pcie-link-degraded": AlertRuleConfig(),  # a downtrained link stays degraded until someone reseats it
    "xid-catalog": AlertRuleConfig(repeat=3),
    "thermal-high": AlertRuleConfig(repeat=3),
    "row-remap-pending": AlertRuleConfig(),
    "straggler-clock": AlertRuleConfig(persist_s=300.0),
    "hazard-model": AlertRuleConfig(),
    "isolation-forest": AlertRuleConfig(),
    "peer-outlier": AlertRuleConfig(),
    "host-anomaly": AlertRuleConfig(),
}


def family(finding: Finding) -> str:
    if finding.rule == "xid-catalog":
        xid = finding.evidence.get("xid")
        return XID_FAMILY.get(xid, "xid") if isinstance(xid, int) else "xid"
    return FAMILY.get(finding.rule, finding.rule)


def rule_config(rule: str, config: AlertsConfig) -> AlertRuleConfig:
    return config.rules.get(rule) or DEFAULT_RULES.get(rule) or AlertRuleConfig()


def grade(finding: Finding, recent: Sequence[Finding], config: AlertsConfig) -> str | None:
    """Why ``finding`` reaches a person, or None when it stays evidence. ``recent``: the node's findings observed
    in the windows before it (it may be among them; ids are compared, so a redelivered one counts once)."""
    if finding.severity in (Severity.CRITICAL, Severity.FATAL):
        return f"{finding.severity.value}: {finding.rule}"
    if finding.severity is not Severity.WARNING:
        return None
    rule = rule_config(finding.rule, config)
    duration = finding.evidence.get("duration_s")
    if rule.persist_s and isinstance(duration, int | float) and duration >= rule.persist_s:
        return f"persists: {finding.rule} for {duration:.0f} s"
    t = finding.observed_ts
    if rule.repeat:
        same = {f.id for f in recent if f.rule == finding.rule and f.gpu_index == finding.gpu_index
                and t - config.repeat_window_s <= f.observed_ts <= t} | {finding.id}
        if len(same) >= rule.repeat:
            return f"repeats: {finding.rule} {len(same)} times within {config.repeat_window_s / 3600:.0f} h"
    if rule.corroborate:
        mine = family(finding)
        for other in recent:
            theirs = family(other)
            if (theirs == mine or other.id == finding.id or abs(t - other.observed_ts) > config.corroborate_s
                    or (mine in NOT_PHYSICAL and theirs in NOT_PHYSICAL)
                    or other.severity not in (Severity.WARNING, Severity.CRITICAL, Severity.FATAL)):
                continue
            if _together(finding, mine, other, theirs):
                return f"corroborated: {finding.rule} and {other.rule}"
    return None


def _together(a: Finding, family_a: str, b: Finding, family_b: str) -> bool:
    """Whether two findings of different families are about the same component: the same GPU, or a node-wide
    signal and anything on the node. The model reads the node's InfiniBand counters on every GPU, so a model
    finding and a node-wide signal are one signal seen twice: the model corroborates its own GPU's signals only."""
    if a.gpu_index is not None and b.gpu_index is not None:
        return a.gpu_index == b.gpu_index
    return "model" not in (family_a, family_b)
