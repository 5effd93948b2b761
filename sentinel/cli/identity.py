"""Who runs an operator command, as the kernel knows it: never an environment variable (``$USER`` and
``$SUDO_USER`` are whatever the caller sets).

The login user comes from the audit login uid (``/proc/self/loginuid``): pam_loginuid sets it at login, it is kept
across ``sudo`` and ``su``, and an unprivileged process cannot change it. The effective user is the process's
own. Operator actions (``requests ack``, ``breaker reset``, ``resume``) record ``login`` or ``login (as
effective)``; a process with no login session (a cron job, a container) records the effective user alone.
"""

from __future__ import annotations

import os
import pwd

NO_LOGIN = 4294967295  # (uid_t) -1: no login session


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def login_uid(path: str = "/proc/self/loginuid") -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            uid = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return None if uid == NO_LOGIN else uid


def operator_identity(loginuid_path: str = "/proc/self/loginuid") -> str:
    effective = os.geteuid()
    login = login_uid(loginuid_path)
    if login is None or login == effective:
        return _name(effective)
    return f"{_name(login)} (as {_name(effective)})"
