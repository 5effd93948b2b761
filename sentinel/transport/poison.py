"""Poison messages: one whose handling raised is dead-lettered with the error as its reason and committed past,
never left to crash-loop the service (issue 38: a forged result once crash-looped three controllers in a row).

Only errors of the message are caught: a broker or store that is away (``TransportError``, ``StoreError``, the
database driver's operational and interface errors) and the machine's own trouble (``OSError``: a full disk) are
not the message's fault; they propagate, the round is retried and nothing is committed.
"""

from __future__ import annotations

TRANSIENT_NAMES = frozenset({"TransportError", "StoreError", "OperationalError", "InterfaceError",
                             "DisconnectionError", "TimeoutError"})


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` comes from what is around the message (retried) rather than from the message itself."""
    return isinstance(exc, OSError) or any(kind.__name__ in TRANSIENT_NAMES for kind in type(exc).__mro__)


def reason(exc: BaseException) -> str:
    return f"handling failed: {type(exc).__name__}: {exc}"[:4096]
