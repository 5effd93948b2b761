"""The transport sections of the config: ``[transport]`` and ``[transport.kafka]``, with the kafka-python client
settings checked before they reach kafka-python (issue 19)."""

from __future__ import annotations

import os
from typing import Literal

import msgspec

from sentinel.config.fields import Section, positive, require

# kafka-python client settings Sentinel passes through (transport.kafka.client), with their valid values where
# they have a fixed set; anything else is refused at config check rather than failing inside kafka-python later
KAFKA_CLIENT_KEYS: dict[str, tuple[str, ...] | None] = {
    "security_protocol": ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    "sasl_mechanism": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"),
    **dict.fromkeys(("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile", "ssl_password", "ssl_ciphers",
                     "ssl_check_hostname", "sasl_plain_username", "sasl_plain_password",
                     "sasl_kerberos_service_name", "sasl_kerberos_domain_name", "client_id", "request_timeout_ms",
                     "connections_max_idle_ms", "reconnect_backoff_ms", "reconnect_backoff_max_ms",
                     "metadata_max_age_ms", "retry_backoff_ms")),
}
KAFKA_CLIENT_FILES = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile")


def _check_kafka_client(client: dict[str, str | int | bool]) -> None:
    for key, value in client.items():
        require(key in KAFKA_CLIENT_KEYS, f"client.{key}", "not a kafka-python setting Sentinel passes on; valid: "
                + ", ".join(sorted(KAFKA_CLIENT_KEYS)), key)
        choices = KAFKA_CLIENT_KEYS[key]
        require(choices is None or value in choices, f"client.{key}", f"must be one of {', '.join(choices or ())}",
                value)
        if key in KAFKA_CLIENT_FILES:
            require(isinstance(value, str) and os.access(value, os.R_OK), f"client.{key}", "no readable file",
                    value)
    protocol = client.get("security_protocol", "PLAINTEXT")
    mechanism = client.get("sasl_mechanism")
    require(not str(protocol).startswith("SASL") or mechanism is not None, "client.sasl_mechanism",
            f"needed with security_protocol {protocol}", mechanism)
    require(not (mechanism == "PLAIN" and protocol == "SASL_PLAINTEXT"), "client.sasl_mechanism",
            "PLAIN over SASL_PLAINTEXT sends the password in clear; use SASL_SSL (or SCRAM)", mechanism)
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        require("sasl_plain_username" in client and "sasl_plain_password" in client, "client.sasl_plain_username",
                f"{mechanism} needs sasl_plain_username and sasl_plain_password (or sasl_plain_password_file)",
                sorted(client))


class KafkaConfig(Section, frozen=True):
    bootstrap: str = "127.0.0.1:9092"
    # partitions per topic when Sentinel creates them; the commands topic always has exactly one partition, so
    # exactly one actuator is active (the group member that holds it)
    partitions: dict[str, int] = msgspec.field(default_factory=lambda: {
        "telemetry": 12, "logs": 12, "findings": 4, "results": 1, "dead-letters": 1})
    # zstd: as small as gzip on the broker, decompressed 8x faster by the detector (decision 0012); gzip for
    # brokers older than Kafka 2.1
    compression: Literal["zstd", "gzip", "none"] = "zstd"
    send_timeout_s: float = 10.0
    session_timeout_ms: int = 10_000  # a dead group member's partitions move after this long
    heartbeat_interval_ms: int = 3_000
    # passed to kafka-python unchanged: security_protocol, ssl_cafile, sasl_mechanism, sasl_plain_username, ...
    client: dict[str, str | int | bool] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        require(bool(self.bootstrap.strip()), "bootstrap", "must name at least one HOST:PORT", self.bootstrap)
        for topic, count in self.partitions.items():
            require(topic in ("telemetry", "logs", "findings", "results", "dead-letters"), f"partitions.{topic}",
                     "not a topic (telemetry, logs, findings, results, dead-letters)", topic)
            require(1 <= count <= 10_000, f"partitions.{topic}", "must be in [1, 10000]", count)
        positive("send_timeout_s", self.send_timeout_s)
        _check_kafka_client(self.client)


class TransportConfig(Section, frozen=True):
    kind: str = "memory"
    capacity: int = 100_000  # messages held per topic by the embedded transport before producers are refused
    kafka: KafkaConfig = msgspec.field(default_factory=KafkaConfig)

    def __post_init__(self) -> None:
        require(self.capacity >= 1, "capacity", "must be >= 1", self.capacity)
