"""Kafka over TLS end to end (issue 19): the transport built from a `[transport.kafka]` config with
`security_protocol = "SSL"` publishes and consumes through a TLS listener, verifies the broker's certificate, and
presents its own client certificate when the listener asks for one.

tansu 0.6.0 (the broker the tests run) takes `--cert`/`--key` but refuses both together and its TLS handshake
never completes, so the TLS listener here is a small terminator at the network boundary: it owns the TLS
session (server certificate, client-certificate check) and pipes the bytes to a real tansu, which advertises the
terminator's address. Everything on our side — config validation, kafka-python's SSL settings, the transport —
is the shipped code."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sentinel.config import from_mapping
from sentinel.daemon import _kafka
from sentinel.errors import TransportError
from sentinel_bench.brokers import free_port, stop, tansu_binary, wait_port


def _cert(tmp: Path, name: str, ca: tuple[Path, Path] | None = None) -> tuple[Path, Path]:
    key, crt = tmp / f"{name}.key", tmp / f"{name}.crt"
    if ca is None:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                        f"/CN={name}", "-keyout", str(key), "-out", str(crt)],
                       check=True, capture_output=True, timeout=60)
        return crt, key
    csr = tmp / f"{name}.csr"
    ext = tmp / f"{name}.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    subprocess.run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
                    str(key), "-out", str(csr)], check=True, capture_output=True, timeout=60)
    subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
                    "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(crt)],
                   check=True, capture_output=True, timeout=60)
    return crt, key


class TlsTerminator:
    """Accepts TLS on ``port`` (client certificates required when ``client_ca`` is given) and forwards the
    plaintext to ``upstream``."""

    def __init__(self, port: int, upstream: int, cert: tuple[Path, Path], client_ca: Path | None) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert[0]), str(cert[1]))
        if client_ca is not None:
            self.context.load_verify_locations(cafile=str(client_ca))
            self.context.verify_mode = ssl.CERT_REQUIRED
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", port))
        self.refused = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            self.refused += 1
            raw.close()
            return
        plain = socket.create_connection(("127.0.0.1", self.upstream))
        threading.Thread(target=self._pipe, args=(plain, tls), daemon=True).start()
        self._pipe(tls, plain)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    tmp = tmp_path_factory.mktemp("kafka-tls")
    ca = _cert(tmp, "sentinel-test-ca")
    broker_cert = _cert(tmp, "broker", ca)
    agent_cert = _cert(tmp, "agent", ca)
    inner, outer = free_port(), free_port()
    with open(tmp / "tansu.log", "wb") as log:
        proc = subprocess.Popen([str(tansu_binary()), "broker", "--listener-url", f"tcp://127.0.0.1:{inner}",
                                 "--advertised-listener-url", f"tcp://127.0.0.1:{outer}",
                                 "--storage-engine", "memory://tansu/"], stdout=log, stderr=subprocess.STDOUT)
    terminator = None
    try:
        wait_port(inner, proc=proc)
        terminator = TlsTerminator(outer, inner, broker_cert, client_ca=ca[0])
        yield {"bootstrap": f"127.0.0.1:{outer}", "ca": ca[0], "agent": agent_cert, "other": _cert(tmp, "stranger"),
               "terminator": terminator}
    finally:
        if terminator is not None:
            terminator.close()
        stop(proc)


def _transport(bootstrap: str, client: dict[str, object]):  # type: ignore[no-untyped-def]
    config = from_mapping({"transport": {"kind": "kafka", "kafka": {
        "bootstrap": bootstrap, "send_timeout_s": 5.0, "session_timeout_ms": 6000, "heartbeat_interval_ms": 1000,
        "client": client}}})
    return _kafka(config)


def test_telemetry_travels_over_tls_with_a_client_certificate(tls_broker: dict) -> None:  # type: ignore[type-arg]
    ca, (crt, key) = tls_broker["ca"], tls_broker["agent"]
    transport = _transport(tls_broker["bootstrap"], {
        "security_protocol": "SSL", "ssl_cafile": str(ca), "ssl_certfile": str(crt), "ssl_keyfile": str(key)})
    topic = f"telemetry-{uuid.uuid4().hex[:8]}"
    try:
        transport.publish_batch([(topic, "gpu-node-001", f"m{i}".encode()) for i in range(50)])
        consumer = transport.consumer(f"g-{uuid.uuid4().hex[:8]}", [topic])
        got: list = []  # type: ignore[type-arg]
        deadline = time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            got.extend(consumer.poll(1000, timeout_s=0.5))
        consumer.close()
    finally:
        transport.close()
    assert [m.value for m in got] == [f"m{i}".encode() for i in range(50)]


def test_a_client_without_a_certificate_the_ca_signed_cannot_produce(tls_broker: dict) -> None:  # type: ignore[type-arg]
    refused_before = tls_broker["terminator"].refused
    crt, key = tls_broker["other"]  # self-signed: not from the cluster's CA
    transport = _transport(tls_broker["bootstrap"], {
        "security_protocol": "SSL", "ssl_cafile": str(tls_broker["ca"]), "ssl_certfile": str(crt),
        "ssl_keyfile": str(key)})
    try:
        with pytest.raises(TransportError):
            transport.publish_batch([("telemetry-forged", "gpu-node-001", b"xid 79")])
    finally:
        transport.close()
    assert tls_broker["terminator"].refused > refused_before


def test_a_broker_certificate_the_configured_ca_did_not_sign_is_refused(tls_broker: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    other_ca, _ = _cert(tmp_path, "some-other-ca")
    crt, key = tls_broker["agent"]
    transport = _transport(tls_broker["bootstrap"], {
        "security_protocol": "SSL", "ssl_cafile": str(other_ca), "ssl_certfile": str(crt), "ssl_keyfile": str(key)})
    try:
        with pytest.raises(TransportError):
            transport.publish_batch([("telemetry-x", "gpu-node-001", b"x")])
    finally:
        transport.close()
