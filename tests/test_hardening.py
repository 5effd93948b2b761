"""Doors of issue 19 closed so far, each with the test that failed before: the agent unit's umask, the
checkpoint handshake's files (a FIFO, a directory or a symlink planted as an acknowledgement; a planted request
reused), and a config file that holds a secret while others can read it."""

from __future__ import annotations

import functools
import os
import threading
import time
from pathlib import Path

import pytest

from sentinel.config import load
from sentinel.errors import ConfigError
from sentinel.hooks import ack
from sentinel_models.hazard import HazardModel
from tests.slurm_cluster import SlurmCluster, wait_for
from tests.test_slurm_actuator import config

UNITS = sorted((Path(__file__).resolve().parent.parent / "systemd").glob("*.service"))


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_every_unit_sets_a_private_umask(unit: Path) -> None:
    """The agent's spool came out 0644: every file a service writes is its own."""
    assert "\nUMask=0077\n" in unit.read_text()


def test_a_fifo_planted_as_the_acknowledgement_neither_hangs_nor_counts(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "42.ack")
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(ack.read_ack(tmp_path, "42")), daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "reading a FIFO blocked the actuator"
    assert got == [None]


def test_a_directory_or_a_symlink_planted_as_the_acknowledgement_does_not_count(tmp_path: Path) -> None:
    (tmp_path / "42.ack").mkdir()
    assert ack.read_ack(tmp_path, "42") is None  # was: IsADirectoryError, caught by nothing
    real = tmp_path / "elsewhere.json"
    ack.write_ack(tmp_path, ack.Ack(request_id="r", job_id="43", step=1, checkpoint="x", ts=1.0))
    os.replace(tmp_path / "43.ack", real)
    (tmp_path / "43.ack").symlink_to(real)
    assert ack.read_ack(tmp_path, "43") is None
    assert ack.read_request(tmp_path, "43") is None


def test_an_acknowledgement_written_by_another_user_does_not_count(tmp_path: Path) -> None:
    """Whoever can write the folder could read the request and answer it for another user's job: the
    acknowledgement must be owned by the job's user (Slurm's user_id for the job)."""
    ack.write_ack(tmp_path, ack.Ack(request_id="r", job_id="44", step=1, checkpoint="x", ts=1.0))
    os.chown(tmp_path / "44.ack", 65534, 65534)  # the tests run as root: hand the file to nobody
    assert ack.read_ack(tmp_path, "44", owner=0) is None
    assert ack.read_ack(tmp_path, "44", owner=65534) is not None
    assert ack.read_ack(tmp_path, "44") is not None  # owner unknown (not Slurm): not checked


def test_slurm_says_whose_job_it_is() -> None:
    from sentinel.actuator.slurm_state import parse_jobs

    fixture = Path(__file__).parent / "fixtures" / "slurm" / "squeue-22.05.json"
    assert {job.user_id for job in parse_jobs(fixture.read_text())} == {0}


def test_a_planted_request_is_never_reused(slurm: SlurmCluster, tmp_path: Path) -> None:
    """A user who can write the folder planted a fresh request and the matching ack for another user's job: the
    actuator used to reuse any request younger than 120 s and took the planted ack for a checkpoint."""
    from sentinel.actuator.slurm import SlurmScheduler

    acks = tmp_path / "ack"
    acks.mkdir()
    job = slurm.submit(f"#!/bin/bash\ntrap '' USR1\ntouch {acks}/$SLURM_JOB_ID.ready\nsleep 300\n", "-o", "/dev/null")
    wait_for(lambda: ack.is_ready(acks, job), 30, "job running with its trap set and opted in")
    planted = ack.Request(request_id="planted", job_id=job, ts=time.time())
    ack.write_request(acks, planted)
    ack.write_ack(acks, ack.Ack(request_id="planted", job_id=job, step=9, checkpoint="fake", ts=time.time()))
    scheduler = SlurmScheduler(config(tmp_path, slurm_conf=slurm.conf, ack_timeout_s=1.5))
    assert scheduler.checkpoint(job) is False  # the job never answered the actuator's own request
    slurm.run("scancel", job)


def test_a_config_with_a_secret_that_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sentinel.toml"
    path.write_text('[store]\nurl = "postgresql+psycopg://sentinel:hunter2@db/sentinel"\n')
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="others can read it"):
        load(path, {})
    path.chmod(0o640)
    assert load(path, {}).store.url.endswith("@db/sentinel")
    path.write_text('[store]\nurl = "sqlite:///x.db"\n')  # no secret in it: any mode is fine
    path.chmod(0o644)
    assert load(path, {}).store.url == "sqlite:///x.db"


@functools.cache
def _fitted() -> HazardModel:
    """One small model for every test here (fitting it is the slow part; each test saves its own copy)."""
    from sentinel_models.hazard import fit
    from tests.test_hazard import _synthetic

    return fit(_synthetic(rows=600), horizon_s=3600.0, target_precision=0.9)


def _saved_model(root: Path) -> Path:
    from sentinel_models import persistence

    return persistence.save(_fitted(), root, "m1", "abc", "synthetic")


def test_a_model_file_changed_after_training_is_not_loaded(tmp_path: Path) -> None:
    from sentinel_models import persistence

    directory = _saved_model(tmp_path / "models")
    assert persistence.load(directory).threshold > 0
    with (directory / persistence.MODEL_FILE).open("ab") as handle:
        handle.write(b"\n")  # any change, as a planted pickle would be
    with pytest.raises(ConfigError, match="does not match"):
        persistence.load(directory)


def test_a_model_in_a_folder_others_can_write_is_not_loaded(tmp_path: Path) -> None:
    """A 0644 pickle planted in a writable models folder was picked as `latest` and its code ran on load."""
    from sentinel_models import persistence

    root = tmp_path / "models"
    directory = _saved_model(root)
    root.chmod(0o777)  # anyone could have planted (or replaced) a model here
    with pytest.raises(ConfigError, match="writable by group or others"):
        persistence.load(persistence.resolve("latest", root))
    root.chmod(0o755)
    directory.chmod(0o775)
    with pytest.raises(ConfigError, match="writable by group or others"):
        persistence.load(directory)
    directory.chmod(0o755)
    os.chown(directory / persistence.MODEL_FILE, 65534, 65534)
    with pytest.raises(ConfigError, match="owned by uid 65534"):
        persistence.load(directory)


def test_a_model_described_without_its_hash_is_not_loaded(tmp_path: Path) -> None:
    import json

    from sentinel_models import persistence

    directory = _saved_model(tmp_path / "models")
    meta = json.loads((directory / persistence.META_FILE).read_text())
    del meta["model_sha256"]
    (directory / persistence.META_FILE).write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="records no SHA-256"):
        persistence.load(directory)


def test_invented_node_names_do_not_widen_the_breaker(repo) -> None:  # type: ignore[no-untyped-def]
    """Anyone who can produce to the telemetry topic can add node names; the breaker's fraction was taken of
    every name ever seen. Once the drain watch has stored the scheduler's node list, only nodes seen among them
    count."""
    from tests.test_effects import NODES, Rig

    def drains(rig: Rig) -> list[str]:
        for node in NODES:
            rig.find(node)
        rig.pump()
        return [d["mode"] for d in repo.table("decisions") if d["action"] == "drain_requeue"]

    rig = Rig(repo)  # max_fraction 0.5 of the fleet per window, 10 real nodes
    for i in range(96):
        repo.ensure_node(f"invented-{i:03d}", rig.clock.now())
    repo.set_scheduler_nodes([*NODES, "cpu-node-001"], rig.clock.now())  # a node without an agent: not counted
    half = len(NODES) // 2  # of the real nodes; of 106 names, all ten would have been drained
    assert drains(rig) == ["execute"] * half + ["observe"] * (len(NODES) - half)


def test_metrics_can_be_served_over_https_with_client_certificates(tmp_path: Path) -> None:
    """/metrics was plain HTTP only (issue 19): with metrics.cert_file and key_file it is HTTPS, and with
    client_ca_file only scrapers holding a certificate that CA signed are answered."""
    import ssl
    import subprocess
    import urllib.error
    import urllib.request

    from sentinel.config import from_mapping
    from sentinel.obs.metrics import Metrics, serve_metrics
    from sentinel_bench.brokers import free_port

    def cert(name: str) -> tuple[Path, Path]:
        key, crt = tmp_path / f"{name}.key", tmp_path / f"{name}.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                        str(crt)], check=True, capture_output=True, timeout=60)
        return crt, key

    server_crt, server_key = cert("server")
    client_crt, client_key = cert("scraper")
    port = free_port()
    tls = from_mapping({"metrics": {"listen": f"127.0.0.1:{port}", "cert_file": str(server_crt),
                                    "key_file": str(server_key), "client_ca_file": str(client_crt)}}).metrics
    close = serve_metrics(tls.listen, Metrics(), tls)
    try:
        context = ssl.create_default_context(cafile=str(server_crt))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):  # no client certificate
            urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10).read()
        context.load_cert_chain(str(client_crt), str(client_key))
        body = urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10).read()
        assert b"sentinel_" in body
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP is not served
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    finally:
        close()
    with pytest.raises(ConfigError, match="key_file go together"):
        from_mapping({"metrics": {"cert_file": str(server_crt)}})


def test_a_job_that_did_not_opt_in_is_never_signalled(slurm: SlurmCluster, tmp_path: Path) -> None:
    """USR1's default action terminates a process: a job without the hook would have been killed by the
    checkpoint request instead of saving. Only a job whose hook wrote <job>.ready is signalled."""
    from sentinel.actuator.slurm import SlurmScheduler

    started = tmp_path / "started"
    job = slurm.submit(f"#!/bin/bash\ntouch {started}\nsleep 300\n", "-o", "/dev/null")  # no trap, no hook
    wait_for(started.exists, 30, "job running")
    scheduler = SlurmScheduler(config(tmp_path, slurm_conf=slurm.conf, ack_timeout_s=1.5))
    assert scheduler.checkpoint(job) is False
    time.sleep(1.0)
    assert slurm.jobs()[job]["job_state"] in ("RUNNING", ["RUNNING"])  # alive: it was not signalled
    slurm.run("scancel", job)


@pytest.mark.parametrize(("client", "error"), [
    ({"security_protcol": "SSL"}, "not a kafka-python setting"),
    ({"security_protocol": "TLS"}, "must be one of PLAINTEXT, SSL"),
    ({"security_protocol": "SASL_SSL"}, "sasl_mechanism: needed"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "a",
      "sasl_plain_password": "b"}, "password in clear"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512"}, "needs sasl_plain_username"),
    ({"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"}, "no readable file"),
])
def test_kafka_client_settings_are_checked_at_config_check(client: dict, error: str) -> None:
    """Kafka TLS/SASL settings used to go to kafka-python unchecked (issue 19): a typo or an insecure pairing
    surfaced, if at all, as a connection failure inside a running service."""
    from sentinel.config import from_mapping

    with pytest.raises(ConfigError, match=error):
        from_mapping({"transport": {"kafka": {"client": client}}})


def test_a_valid_sasl_ssl_client_passes(tmp_path: Path) -> None:
    from sentinel.config import from_mapping

    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    client = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "agent",
              "sasl_plain_password": "x", "ssl_cafile": str(ca)}
    assert from_mapping({"transport": {"kafka": {"client": client}}}).transport.kafka.client == client


def test_telemetry_from_a_name_the_scheduler_does_not_manage_is_dead_lettered(repo) -> None:  # type: ignore[no-untyped-def]
    """Anyone who can produce to the topics could report (and fake an Xid 79 for) invented nodes. Once the drain
    watch has stored the scheduler's node list, such samples and log lines go to the dead-letter topic."""
    from sentinel.transport import DEAD_LETTERS
    from tests.test_pipeline import NODES, make_rig

    rig = make_rig(repo)
    repo.set_scheduler_nodes(NODES, rig.clock.now())
    rig.pipeline.detector._known_read = float("-inf")  # read the list at the next poll (every 60 s otherwise)
    letters = rig.pipeline.transport.consumer("test-dl", [DEAD_LETTERS])
    rig.sample("invented-001")
    rig.xid("invented-001", 79)
    rig.tick()
    reasons = [m.value for m in letters.poll(100)]
    assert len(reasons) == 2 and all(b"not managed by the scheduler" in r for r in reasons)
    assert repo.incidents() == [] and "invented-001" not in {n["name"] for n in repo.table("nodes", "name")}
    rig.xid(NODES[0], 79)  # the real ones still count
    rig.tick()
    assert [i["node"] for i in repo.incidents()] == [NODES[0]]


def test_with_a_service_key_only_models_it_signed_are_loaded(tmp_path: Path) -> None:
    """Whoever owns the models folder could plant a model whose model.json records the planted file's hash.
    `sentinel train` signs model.json with the service's key; the detector, holding that key, loads nothing
    else."""
    import json

    from sentinel_models import persistence

    key, other = b"k" * 32, b"o" * 32
    model = _fitted()
    signed = persistence.save(model, tmp_path, "signed", "abc", "synthetic", sign_key=key)
    assert persistence.load(signed, [other, key]).threshold > 0  # any of the keys (rotation)
    with pytest.raises(ConfigError, match="does not match"):
        persistence.load(signed, [other])
    meta = json.loads((signed / persistence.META_FILE).read_text())
    meta["threshold"] = 0.01  # a consistent-looking change of the description
    (signed / persistence.META_FILE).write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="does not match"):
        persistence.load(signed, [key])
    planted = persistence.save(model, tmp_path, "planted", "abc", "synthetic")  # hash right, no signature
    assert persistence.load(planted).threshold > 0  # without a service key: the hash check only
    with pytest.raises(ConfigError, match="no model.sig"):
        persistence.load(planted, [key])


def test_model_list_and_show_say_whether_the_detector_would_load_a_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from sentinel.cli.main import main
    from sentinel_models import persistence

    root = tmp_path / "models"
    good = _saved_model(root)
    assert main(["model", "list", "--models-dir", str(root), "-o", "json"]) == 0
    listed = {m["name"]: m["verified"] for m in json.loads(capsys.readouterr().out)}
    assert listed == {"m1": "ok", "shipped": "ok"}  # the shipped model is always listed, verified by its pins
    with (good / persistence.MODEL_FILE).open("ab") as handle:
        handle.write(b"\n")
    assert main(["model", "show", "m1", "--models-dir", str(root), "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["verified"].startswith("refused: ") and "does not match" in shown["verified"]


def test_a_refused_model_leaves_the_detector_on_its_rules_and_says_so(tmp_path: Path, repo) -> None:  # type: ignore[no-untyped-def]
    """A planted or changed model must neither run nor take fault detection down with it: the detector starts
    on its rules, logs the refusal and sets sentinel_model_refused (alert SentinelModelRefused). A model name
    that does not exist is still a configuration error at start-up."""
    from sentinel.clock import ManualClock
    from sentinel.config import from_mapping
    from sentinel.daemon import build_detector
    from sentinel.obs.metrics import Metrics
    from sentinel.transport.memory import MemoryTransport
    from sentinel_models import persistence

    root = tmp_path / "models"
    directory = _saved_model(root)
    with (directory / persistence.MODEL_FILE).open("ab") as handle:
        handle.write(b"\n")
    config = from_mapping({"detector": {"hazard": {"model": "m1", "models_dir": str(root)}}})
    metrics = Metrics()
    detector = build_detector(config, ManualClock(0.0), metrics, repo, MemoryTransport())
    assert detector.hazard is None
    assert metrics.registry.get_sample_value("sentinel_model_refused") == 1
    missing = from_mapping({"detector": {"hazard": {"model": "m2", "models_dir": str(root)}}})
    with pytest.raises(ConfigError, match="not found"):
        build_detector(missing, ManualClock(0.0), Metrics(), repo, MemoryTransport())
