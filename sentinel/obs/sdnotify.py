"""systemd's notify protocol (READY=1, WATCHDOG=1) without a dependency: one datagram to $NOTIFY_SOCKET."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


def notifier(environ: Mapping[str, str] | None = None) -> Callable[[str], None] | None:
    """A function that sends a state string to systemd, or None when not started by systemd with Type=notify."""
    address = (environ if environ is not None else os.environ).get("NOTIFY_SOCKET", "")
    if not address:
        return None
    target = "\0" + address[1:] if address.startswith("@") else address  # '@' = abstract namespace

    def send(state: str) -> None:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.connect(target)
                sock.sendall(state.encode())
        except OSError as exc:  # systemd gone or socket wrong: log, never crash the agent over it
            log.warning("cannot notify systemd at %s: %s", address, exc)

    return send


class Heartbeat:
    """The service loop's side of the protocol, written once: READY=1 with the first beat, WATCHDOG=1 with every
    beat (one per round of the loop, failed or not: the watchdog catches a hung loop, not a broker outage).
    Does nothing when the process was not started by systemd with Type=notify."""

    def __init__(self, notify: Callable[[str], None] | None) -> None:
        self.notify = notify
        self.ready = False

    def beat(self) -> None:
        if self.notify is None:
            return
        self.notify("WATCHDOG=1" if self.ready else "READY=1\nWATCHDOG=1")
        self.ready = True
