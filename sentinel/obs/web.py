"""``/metrics`` behind the Prometheus exporter web configuration (``metrics.web_config_file``).

The file is the one every Prometheus exporter reads (the exporter-toolkit format), so an operator who secured
node-exporter secures Sentinel the same way::

    tls_server_config:
      cert_file: /etc/sentinel/tls/metrics.crt
      key_file: /etc/sentinel/tls/metrics.key
      client_ca_file: /etc/sentinel/tls/scrapers-ca.crt      # optional
      client_auth_type: RequireAndVerifyClientCert          # NoClientCert (default) | VerifyClientCertIfGiven
      min_version: TLS12                                    # TLS12 (default) | TLS13
    basic_auth_users:
      prometheus: $2b$12$...   # bcrypt hash (htpasswd -nBC 12 "" | tr -d ':\\n')

Supported: the keys above. Anything else (``http_server_config``, ``cipher_suites``, ...) is refused with its
name rather than ignored, so nobody believes a setting is in force when it is not. Basic-auth passwords are
checked with bcrypt (the ``web`` extra: PyYAML and bcrypt); a verified (user, password) pair is remembered as a
SHA-256 digest so a scrape every 15 s does not cost a bcrypt round each time.

The TLS handshake runs on the connection's own thread with a timeout (``HANDSHAKE_TIMEOUT_S``), never in the
accept loop, so one idle connection cannot stop every scrape (issue 38). Failed logins are throttled per client
address: after ``FREE_FAILURES`` failures in a row a client waits, doubling up to ``MAX_WAIT_S``, and is answered
429 without a bcrypt round until then.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from sentinel.errors import ConfigError

log = logging.getLogger(__name__)

_TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version"}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
HANDSHAKE_TIMEOUT_S = 10.0  # a client that has not finished its TLS handshake (or its request) by then is dropped
FREE_FAILURES = 5  # failed logins a client may make in a row before it has to wait
MAX_WAIT_S = 60.0
MAX_CLIENTS = 10_000  # client addresses remembered for throttling (the oldest forgotten first)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]


@dataclass(frozen=True)
class WebConfig:
    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""
    client_auth: ssl.VerifyMode = ssl.CERT_NONE
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    users: dict[str, bytes] = field(default_factory=dict)  # name -> bcrypt hash

    @property
    def tls(self) -> bool:
        return bool(self.cert_file)


def load_web_config(path: str) -> WebConfig:
    """Read and check ``path``; every problem is a ConfigError naming the file and the key."""
    where = f"metrics.web_config_file ({path})"
    try:
        import yaml
    except ImportError as exc:
        raise ConfigError(f"{where}: needs PyYAML and bcrypt: pip install 'sentinel-gpu[web]'") from exc
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a mapping")
    unknown = set(raw) - {"tls_server_config", "basic_auth_users"}
    if unknown:
        raise ConfigError(f"{where}: not supported here: {', '.join(sorted(map(str, unknown)))} "
                          "(supported: tls_server_config, basic_auth_users)")
    tls = _tls_section(raw.get("tls_server_config") or {}, where)
    users = _users(raw.get("basic_auth_users") or {}, where)
    return WebConfig(users=users, **tls)


def _tls_section(tls: Any, where: str) -> dict[str, Any]:
    if not isinstance(tls, dict):
        raise ConfigError(f"{where}: tls_server_config must be a mapping")
    unknown = set(tls) - _TLS_KEYS
    if unknown:
        raise ConfigError(f"{where}: tls_server_config.{sorted(map(str, unknown))[0]}: not supported "
                          f"(supported: {', '.join(sorted(_TLS_KEYS))})")
    out: dict[str, Any] = {}
    for key in ("cert_file", "key_file", "client_ca_file"):
        value = tls.get(key) or ""
        if value and not os.path.isfile(value):
            raise ConfigError(f"{where}: tls_server_config.{key}: no such file: {value}")
        out[key] = str(value)
    if bool(out["cert_file"]) != bool(out["key_file"]):
        raise ConfigError(f"{where}: tls_server_config: cert_file and key_file go together")
    auth = tls.get("client_auth_type", "RequireAndVerifyClientCert" if out["client_ca_file"] else "NoClientCert")
    if auth not in _CLIENT_AUTH:
        raise ConfigError(f"{where}: tls_server_config.client_auth_type: {auth!r} not supported "
                          f"(one of {', '.join(_CLIENT_AUTH)})")
    if _CLIENT_AUTH[auth] != ssl.CERT_NONE and not out["client_ca_file"]:
        raise ConfigError(f"{where}: tls_server_config.client_auth_type {auth} needs client_ca_file")
    version = tls.get("min_version", "TLS12")
    if version not in _VERSIONS:
        raise ConfigError(f"{where}: tls_server_config.min_version: {version!r} (one of {', '.join(_VERSIONS)})")
    if (auth != "NoClientCert" or "min_version" in tls) and not out["cert_file"]:
        raise ConfigError(f"{where}: tls_server_config needs cert_file and key_file")
    out["client_auth"] = _CLIENT_AUTH[auth]
    out["min_version"] = _VERSIONS[version]
    return out


def _users(users: Any, where: str) -> dict[str, bytes]:
    if not isinstance(users, dict):
        raise ConfigError(f"{where}: basic_auth_users must be a mapping of user to bcrypt hash")
    if users:
        try:
            import bcrypt  # noqa: F401  (checked here so a missing extra fails at config check, not at a scrape)
        except ImportError as exc:
            raise ConfigError(f"{where}: basic_auth_users needs bcrypt: pip install 'sentinel-gpu[web]'") from exc
    out: dict[str, bytes] = {}
    for name, hashed in users.items():
        text = str(hashed or "")
        if not text.startswith(("$2a$", "$2b$", "$2y$")) or len(text) != 60:
            raise ConfigError(f"{where}: basic_auth_users.{name}: not a bcrypt hash "
                              "(make one with: htpasswd -nBC 12 '' | tr -d ':\\n')")
        out[str(name)] = text.encode()
    return out


class BasicAuth:
    """WSGI middleware: 401 unless the request carries a user of ``users`` and the password its hash holds; 429
    for a client address that failed ``FREE_FAILURES`` times in a row, until its wait is over."""

    def __init__(self, app: App, users: dict[str, bytes], on_reject: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._app = app
        self._users = users
        self._verified: set[bytes] = set()
        self._lock = threading.Lock()
        self._on_reject = on_reject
        self._clock = clock
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # client -> (in a row, wait until)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        client = str(environ.get("REMOTE_ADDR", ""))
        now = self._clock()
        with self._lock:
            failures, until = self._failures.get(client, (0, 0.0))
        if now < until:
            if self._on_reject is not None:
                self._on_reject()
            start_response("429 Too Many Requests", [("Content-Type", "text/plain"),
                                                     ("Retry-After", str(max(1, round(until - now))))])
            return [b"Too many failed logins; wait\n"]
        if self._allowed(environ.get("HTTP_AUTHORIZATION", "")):
            if failures:
                with self._lock:
                    self._failures.pop(client, None)
            return self._app(environ, start_response)
        self._failed(client, now)
        if self._on_reject is not None:
            self._on_reject()
        start_response("401 Unauthorized", [("Content-Type", "text/plain"),
                                            ("WWW-Authenticate", 'Basic realm="sentinel"')])
        return [b"Unauthorized\n"]

    def _failed(self, client: str, now: float) -> None:
        with self._lock:
            failures = self._failures.pop(client, (0, 0.0))[0] + 1
            wait = min(2.0 ** (failures - FREE_FAILURES), MAX_WAIT_S) if failures >= FREE_FAILURES else 0.0
            self._failures[client] = (failures, now + wait)
            while len(self._failures) > MAX_CLIENTS:
                self._failures.popitem(last=False)
        if wait:
            log.warning("metrics: %d failed logins in a row from %s; it waits %.0f s", failures, client, wait)

    def _allowed(self, header: str) -> bool:
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self._users.get(user)
        if not sep or hashed is None:
            return False
        digest = hashlib.sha256(hashed + b"\0" + password.encode()).digest()
        with self._lock:
            if any(hmac.compare_digest(digest, seen) for seen in self._verified):
                return True
        import bcrypt

        if not bcrypt.checkpw(password.encode(), hashed):
            return False
        with self._lock:
            self._verified.add(digest)
        return True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("metrics: " + format, *args)


def server_context(web: WebConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = web.min_version
    context.load_cert_chain(web.cert_file, web.key_file)
    if web.client_ca_file:
        context.load_verify_locations(cafile=web.client_ca_file)
    context.verify_mode = web.client_auth
    return context


class _TlsServer(ThreadingWSGIServer):
    """Accepts plain connections and runs each one's TLS handshake on that connection's thread, with a timeout."""

    context: ssl.SSLContext

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:  # a scanner, a wrong certificate, a client that went idle
            log.debug("metrics: TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()


def serve_web(host: str, port: int, registry: CollectorRegistry, web: WebConfig,
              on_reject: Callable[[], None] | None = None) -> Callable[[], None]:
    """Serve ``registry`` on HOST:PORT as ``web`` says; return what stops it."""
    app: App = make_wsgi_app(registry)
    if web.users:
        app = BasicAuth(app, web.users, on_reject)
    httpd: ThreadingWSGIServer
    if web.tls:
        tls_server = make_server(host, port, app, _TlsServer, handler_class=_QuietHandler)
        tls_server.context = server_context(web)
        httpd = tls_server
    else:
        httpd = make_server(host, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, name="metrics-web", daemon=True)
    thread.start()

    def close() -> None:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)

    return close
