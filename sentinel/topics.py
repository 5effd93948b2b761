"""Topic names: the floor below the transports and the metrics that label by topic."""

from __future__ import annotations

TELEMETRY = "sentinel.telemetry"
LOGS = "sentinel.logs"
FINDINGS = "sentinel.findings"
COMMANDS = "sentinel.commands"
RESULTS = "sentinel.results"
DEAD_LETTERS = "sentinel.dead-letters"
ALL_TOPICS = (TELEMETRY, LOGS, FINDINGS, COMMANDS, RESULTS, DEAD_LETTERS)
