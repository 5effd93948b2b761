"""The ``[alerts]`` section: how findings (evidence) are graded into the one operator-facing alert stream
(``sentinel.alerts.grading``, docs/alerts.md)."""

from __future__ import annotations

import msgspec

from sentinel.config.fields import Section, non_negative, positive, require


class AlertRuleConfig(Section, frozen=True):
    """How a warning finding of one rule becomes an alert; any one of the three ways is enough."""

    repeat: int = 0  # findings of the rule on the same component within alerts.repeat_window_s; 0 = not by repeats
    persist_s: float = 0.0  # the rule's own episode has lasted this long (its evidence's duration_s); 0 = never
    corroborate: bool = True  # a second physical signal (or the model, or the job's peers) on the same component

    def __post_init__(self) -> None:
        require(0 <= self.repeat <= 1000, "repeat", "must be in [0, 1000]", self.repeat)
        non_negative("persist_s", self.persist_s)


class AlertsConfig(Section, frozen=True):
    corroborate_s: float = 3600.0  # two signals corroborate each other when they come within this long
    repeat_window_s: float = 86_400.0  # NVSentinel: NVLink errors escalate when they repeat within 24 h
    flap_hold_s: float = 3600.0  # an alert on a node whose previous alert ended this recently is held, not re-sent
    # Per rule (a name of docs/detection.md's rules); a rule not named takes sentinel.alerts.grading's default.
    rules: dict[str, AlertRuleConfig] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        positive("corroborate_s", self.corroborate_s)
        positive("repeat_window_s", self.repeat_window_s)
        non_negative("flap_hold_s", self.flap_hold_s)
