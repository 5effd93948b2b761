"""Secrets inside URLs: found wherever they sit, and redacted before a URL is printed or logged.

A store URL may carry a password in its userinfo (``postgresql://user:pass@host/db``, a password with ``/`` or
``@`` in it included) or in its query (``?password=...``, libpq's ``sslpassword``, a token). Both count as a
secret in the config (``_refuse_readable_secrets``) and both are replaced by ``***`` in what ``config check``,
the banners and the logs print. No SQLAlchemy here: the config is read by every verb.
"""

from __future__ import annotations

import re

SECRET_PARAM = re.compile(r"pass|pwd|secret|token|credential|api[_-]?key", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _split(url: str) -> tuple[str, str, str, str] | None:
    """(scheme://, userinfo, rest up to the query, query) or None when ``url`` has no scheme."""
    head = _SCHEME.match(url)
    if head is None:
        return None
    body, _, query = url[head.end():].partition("?")
    userinfo, at, rest = body.rpartition("@")  # the last @: a password may hold @ or / itself
    return (head.group(), userinfo if at else "", rest if at else body, query)


def url_secrets(url: str) -> list[str]:
    """What in ``url`` is a secret: ``"password"`` for one in the userinfo, and the name of every secret-looking
    query parameter."""
    parts = _split(url)
    if parts is None:
        return []
    _, userinfo, _, query = parts
    found = ["password"] if ":" in userinfo and userinfo.split(":", 1)[1] else []
    for pair in query.split("&") if query else []:
        name, eq, value = pair.partition("=")
        if eq and value and SECRET_PARAM.search(name):
            found.append(name)
    return found


def redact_url(url: str) -> str:
    """``url`` with every secret ``url_secrets`` finds replaced by ``***``."""
    parts = _split(url)
    if parts is None:
        return url
    head, userinfo, rest, query = parts
    if ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    pairs = []
    for pair in query.split("&") if query else []:
        name, eq, value = pair.partition("=")
        pairs.append(f"{name}=***" if eq and value and SECRET_PARAM.search(name) else pair)
    return head + (f"{userinfo}@" if userinfo else "") + rest + (f"?{'&'.join(pairs)}" if query else "")
