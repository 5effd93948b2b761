"""One exception base for everything Sentinel raises on purpose.

The CLI prints ``error: <message>`` for any ``SentinelError`` and exits non-zero; daemons log, count and skip
the one bad node, message or action that raised it.
"""

from __future__ import annotations


class SentinelError(Exception):
    """Base of every deliberate Sentinel error."""


class ConfigError(SentinelError):
    """The configuration is invalid; the message names the path (``policy.breaker.max_fraction: ...``)."""


class ModelRefused(ConfigError):
    """A model file that exists but fails an integrity check (signature, hash, ownership, features)."""


class CodecError(SentinelError):
    """Bytes that are not a valid record of the current schema; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TransportError(SentinelError):
    """The transport cannot accept or deliver a message (full, closed, broker unreachable)."""


class StoreError(SentinelError):
    """The store is missing, not migrated, or unreachable."""


class ActuatorError(SentinelError):
    """A scheduler refused or failed an action."""


class CheckpointFailed(ActuatorError):
    """One job's checkpoint handshake could not run (a file planted in the folder, a folder not the actuator's,
    a job whose owner is unknown): that job is not checkpointed, and the plan goes on without it."""


class ValidationError(SentinelError):
    """A name or value from outside (CLI argument, scheduler output) is not acceptable."""


class CollectorError(SentinelError):
    """A collector could not read its source (driver missing, endpoint unreachable, file unreadable)."""
