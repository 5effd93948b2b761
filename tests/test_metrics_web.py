"""/metrics behind a Prometheus exporter web configuration file (issue 19): TLS and bcrypt basic auth, served
for real on a local port and scraped with urllib; the file checked by `sentinel config check`."""

from __future__ import annotations

import base64
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from sentinel.cli.main import main
from sentinel.config import from_mapping
from sentinel.errors import ConfigError
from sentinel.obs.metrics import Metrics, serve_metrics
from sentinel.obs.web import load_web_config
from sentinel_bench.brokers import free_port


def _cert(tmp_path: Path, name: str) -> tuple[Path, Path]:
    key, crt = tmp_path / f"{name}.key", tmp_path / f"{name}.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                    str(crt)], check=True, capture_output=True, timeout=60)
    return crt, key


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


def _get(url: str, user: str | None = None, password: str = "", context: ssl.SSLContext | None = None) -> int:
    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            assert b"sentinel_samples_total" in response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_basic_auth_over_tls_answers_only_the_right_password(tmp_path: Path) -> None:
    crt, key = _cert(tmp_path, "server")
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
                   f"basic_auth_users:\n  prometheus: '{_hash('s3cret')}'\n")
    port = free_port()
    cfg = from_mapping({"metrics": {"listen": f"127.0.0.1:{port}", "web_config_file": str(web)}}).metrics
    metrics = Metrics()
    close = serve_metrics(cfg.listen, metrics, cfg)
    url = f"https://127.0.0.1:{port}/metrics"
    context = ssl.create_default_context(cafile=str(crt))
    try:
        assert _get(url, context=context) == 401
        assert _get(url, "prometheus", "wrong", context=context) == 401
        assert _get(url, "nobody", "s3cret", context=context) == 401
        assert _get(url, "prometheus", "s3cret", context=context) == 200
        assert _get(url, "prometheus", "s3cret", context=context) == 200  # the remembered digest path
        assert metrics.registry.get_sample_value("sentinel_metrics_auth_rejected_total") == 3
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plain HTTP beside it
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    finally:
        close()


def test_client_certificates_can_be_required_through_the_web_config(tmp_path: Path) -> None:
    server_crt, server_key = _cert(tmp_path, "server")
    client_crt, client_key = _cert(tmp_path, "scraper")
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {server_crt}\n  key_file: {server_key}\n"
                   f"  client_ca_file: {client_crt}\n  client_auth_type: RequireAndVerifyClientCert\n"
                   "  min_version: TLS13\n")
    port = free_port()
    cfg = from_mapping({"metrics": {"listen": f"127.0.0.1:{port}", "web_config_file": str(web)}}).metrics
    close = serve_metrics(cfg.listen, Metrics(), cfg)
    url = f"https://127.0.0.1:{port}/metrics"
    try:
        context = ssl.create_default_context(cafile=str(server_crt))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            _get(url, context=context)
        context.load_cert_chain(str(client_crt), str(client_key))
        assert _get(url, context=context) == 200
    finally:
        close()


@pytest.mark.parametrize(("text", "message"), [
    ("http_server_config:\n  http2: false\n", "not supported here: http_server_config"),
    ("tls_server_config:\n  cipher_suites: [x]\n", "cipher_suites: not supported"),
    ("basic_auth_users:\n  alice: hunter2\n", "basic_auth_users.alice: not a bcrypt hash"),
    ("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n", "no such file"),
    ("tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
    ("tls_server_config:\n  client_auth_type: Maybe\n", "client_auth_type: 'Maybe' not supported"),
    ("- just\n- a list\n", "must be a mapping"),
    ("a: [unclosed\n", "not valid YAML"),
])
def test_a_web_config_that_cannot_be_honoured_is_refused_naming_the_key(tmp_path: Path, text: str,
                                                                        message: str) -> None:
    web = tmp_path / "web.yml"
    web.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_web_config(str(web))


def test_config_check_reports_a_bad_web_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users:\n  prometheus: plaintext\n")
    path = tmp_path / "sentinel.toml"
    path.write_text(f'[metrics]\nlisten = "127.0.0.1:9400"\nweb_config_file = "{web}"\n')
    assert main(["config", "check", str(path)]) == 1
    assert "basic_auth_users.prometheus: not a bcrypt hash" in capsys.readouterr().err
    web.write_text(f"basic_auth_users:\n  prometheus: '{_hash('pw')}'\n")
    assert main(["config", "check", str(path)]) == 0
    with pytest.raises(ConfigError, match="set one or the other"):
        from_mapping({"metrics": {"web_config_file": str(web), "cert_file": "a", "key_file": "b"}})


def test_one_idle_connection_does_not_stop_scrapes_over_tls(tmp_path: Path) -> None:
    """The handshake ran in the accept loop on e5bcaaa: a client that connected and said nothing made every
    scrape time out."""
    import socket

    crt, key = _cert(tmp_path, "server")
    port = free_port()
    cfg = from_mapping({"metrics": {"listen": f"127.0.0.1:{port}", "cert_file": str(crt),
                                    "key_file": str(key)}}).metrics
    close = serve_metrics(cfg.listen, Metrics(), cfg)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]  # never a ClientHello
    try:
        context = ssl.create_default_context(cafile=str(crt))
        request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            assert response.status == 200 and b"sentinel_samples_total" in response.read()
    finally:
        for sock in idle:
            sock.close()
        close()


def test_failed_logins_are_throttled_per_client(tmp_path: Path) -> None:
    from sentinel.obs.web import FREE_FAILURES, BasicAuth

    now = [0.0]
    seen: list[str] = []
    def app(environ: dict, start: Any) -> list[bytes]:
        start("200 OK", [])
        return [b"ok"]

    auth = BasicAuth(app, {"prometheus": _hash("s3cret").encode()}, clock=lambda: now[0])

    def ask(password: str, client: str = "10.0.0.9") -> str:
        token = base64.b64encode(f"prometheus:{password}".encode()).decode()
        auth({"REMOTE_ADDR": client, "HTTP_AUTHORIZATION": f"Basic {token}"},
             lambda status, headers: seen.append(status))
        return "200" if seen[-1] == "200 OK" else seen[-1]

    for _ in range(FREE_FAILURES):
        assert ask("wrong").startswith("401")
    assert ask("s3cret").startswith("429")  # waiting: not even the right password is checked
    assert ask("s3cret", client="10.0.0.10") == "200"  # another client is not held up
    now[0] += 1.5
    assert ask("s3cret") == "200"  # the wait is over; a success clears the count
    assert ask("wrong").startswith("401")


def test_a_real_server_answers_429_after_repeated_failures(tmp_path: Path) -> None:
    from sentinel.obs.web import FREE_FAILURES

    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: '{_hash('s3cret')}'\n")
    port = free_port()
    cfg = from_mapping({"metrics": {"listen": f"127.0.0.1:{port}", "web_config_file": str(web)}}).metrics
    close = serve_metrics(cfg.listen, Metrics(), cfg)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        assert [_get(url, "prometheus", "wrong") for _ in range(FREE_FAILURES)] == [401] * FREE_FAILURES
        assert _get(url, "prometheus", "wrong") == 429
    finally:
        close()
