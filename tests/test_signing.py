"""Only the controller can order a drain: forged, tampered, expired, replayed and unsigned commands are refused,
counted by reason, and nothing is executed; key files must be private."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel import codec
from sentinel.actuator.signing import (
    CommandRejected,
    CommandSigner,
    CommandVerifier,
    MemoryNonces,
    SigningKey,
    load_key,
    write_key,
)
from sentinel.actuator.steps import SchedulerActuator
from sentinel.clock import ManualClock
from sentinel.config import from_mapping
from sentinel.daemon import Pipeline, build_pipeline, command_signing
from sentinel.errors import ConfigError
from sentinel.events import ActionKind, Command, SignedCommand
from sentinel.obs.metrics import Metrics
from sentinel.sim.scheduler import SimScheduler
from sentinel.store.engine import make_engine
from sentinel.store.repository import Repository
from sentinel.transport import COMMANDS, DEAD_LETTERS

NODES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]


def key_file(tmp_path: Path, name: str = "key", mode: int = 0o600, content: str = "k" * 40) -> str:
    path = tmp_path / name
    path.write_text(content + "\n")
    path.chmod(mode)
    return str(path)


@dataclass
class Rig:
    pipeline: Pipeline
    scheduler: SimScheduler
    clock: ManualClock
    repo: Repository
    metrics: Metrics
    signer: CommandSigner

    def command(self, node: str = "gpu-b", ttl_s: float = 300.0, **fields: object) -> Command:
        now = self.clock.now()
        base = {"id": f"inc-{node}:drain_requeue:cmd", "decision_id": f"inc-{node}:drain_requeue",
                "incident_id": f"inc-{node}", "node": node, "action": ActionKind.DRAIN_REQUEUE, "ts": now,
                "expires_ts": now + ttl_s, "drain_reason": f"sentinel: inc-{node} test"}
        return Command(**{**base, **fields})  # type: ignore[arg-type]

    def send(self, data: bytes) -> None:
        self.pipeline.transport.publish(COMMANDS, "gpu-b", data)
        self.pipeline.actuator.step()

    def rejected(self, reason: str) -> float:
        return self.metrics.registry.get_sample_value("sentinel_commands_rejected_total", {"reason": reason}) or 0.0

    def untouched(self) -> bool:
        """Nothing was executed: no node drained, no job requeued, no step result published or stored."""
        return (all(self.scheduler.drain_reason(n) is None for n in NODES)
                and all(j.requeues == 0 for j in self.scheduler.jobs.values())
                and self.metrics.registry.get_sample_value("sentinel_messages_published_total",
                                                           {"topic": "sentinel.results"}) is None)


@pytest.fixture
def rig(repo: Repository, tmp_path: Path) -> Rig:
    config = from_mapping({"policy": {"mode": "act"}, "security": {"key_file": key_file(tmp_path)}})
    clock = ManualClock()
    scheduler = SimScheduler(NODES, clock)
    scheduler.submit("job-1", 2)
    metrics = Metrics()
    pipeline = build_pipeline(config, clock, metrics, repo, actuator=SchedulerActuator(scheduler, clock))
    return Rig(pipeline, scheduler, clock, repo, metrics, pipeline.controller.signer)


def test_a_validly_signed_command_is_carried_out(rig: Rig) -> None:
    rig.send(codec.encode(rig.signer.seal(rig.command())))
    assert rig.scheduler.drain_reason("gpu-b") == "sentinel: inc-gpu-b test"
    assert sum(rig.rejected(r) for r in ("unsigned", "bad_signature", "expired", "replayed")) == 0


def test_an_unsigned_command_is_refused_and_nothing_runs(rig: Rig) -> None:
    rig.send(codec.encode(rig.command()))
    assert rig.rejected("unsigned") == 1 and rig.untouched()
    [letter] = rig.pipeline.transport.consumer("dlq", [DEAD_LETTERS]).poll(10)
    assert "unsigned" in codec.decode(letter.value).reason  # type: ignore[union-attr]


def test_a_command_signed_with_another_key_is_refused(rig: Rig) -> None:
    forger = CommandSigner(SigningKey(b"f" * 32, "attacker"))
    rig.send(codec.encode(forger.seal(rig.command())))
    assert rig.rejected("unknown_key") == 1 and rig.untouched()


def test_a_forgery_that_copies_the_key_id_fails_the_signature(rig: Rig) -> None:
    forged = CommandSigner(SigningKey(b"f" * 32, "attacker")).seal(rig.command())
    forged = msgspec.structs.replace(forged, key_id=rig.signer.key.key_id)
    rig.send(codec.encode(forged))
    assert rig.rejected("bad_signature") == 1 and rig.untouched()


@pytest.mark.parametrize("field", ["payload", "expires_ts", "nonce", "signature"])
def test_a_tampered_envelope_is_refused(rig: Rig, field: str) -> None:
    sealed = rig.signer.seal(rig.command(node="gpu-b"))
    changed = {
        "payload": codec.encode(rig.command(node="gpu-c")),  # redirect the drain to another node
        "expires_ts": sealed.expires_ts + 3000,
        "nonce": "0" * 32,
        "signature": "0" * 64,
    }[field]
    rig.send(codec.encode(msgspec.structs.replace(sealed, **{field: changed})))
    assert rig.rejected("bad_signature") == 1 and rig.untouched()


def test_an_expired_command_is_refused(rig: Rig) -> None:
    sealed = rig.signer.seal(rig.command(ttl_s=60))
    rig.clock.advance(61)
    rig.send(codec.encode(sealed))
    assert rig.rejected("expired") == 1 and rig.untouched()


def test_a_command_valid_too_far_ahead_is_refused(rig: Rig) -> None:
    rig.send(codec.encode(rig.signer.seal(rig.command(ttl_s=10 * 86_400))))
    assert rig.rejected("expired") == 1 and rig.untouched()


def test_a_replayed_command_is_refused_even_after_the_actuator_restarts(rig: Rig, sqlite_url: str) -> None:
    data = codec.encode(rig.signer.seal(rig.command()))
    rig.send(data)
    assert rig.scheduler.drain_reason("gpu-b") is not None
    requeues = sum(j.requeues for j in rig.scheduler.jobs.values())
    rig.send(data)
    assert rig.rejected("replayed") == 1
    restarted = CommandVerifier([rig.signer.key], Repository(make_engine(sqlite_url)), rig.clock, 3600.0)
    with pytest.raises(CommandRejected) as info:
        restarted.open(data)
    assert info.value.reason == "replayed"
    assert sum(j.requeues for j in rig.scheduler.jobs.values()) == requeues


@pytest.mark.parametrize("node", ["gpu-b; rm -rf /", "$(reboot)", "gpu-b\n", "`id`", "a|b", "-rf"])
def test_a_signed_command_naming_a_node_with_shell_metacharacters_is_refused_before_anything_runs(
    rig: Rig, node: str
) -> None:
    command = rig.command(node=node)  # struct constructors do not validate: the decoder is the gate
    rig.send(codec.encode(rig.signer.seal(command)))
    assert rig.rejected("invalid_command") == 1 and rig.untouched()


def test_garbage_on_the_commands_topic_is_refused_as_malformed(rig: Rig) -> None:
    rig.send(b'{"type":"signed_command","key_id":"x"}')
    rig.send(b"\x00\xff")
    assert rig.rejected("malformed") == 2 and rig.untouched()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255))
def test_flipping_any_byte_of_a_sealed_command_never_yields_an_accepted_different_command(
    position: int, flip: int
) -> None:
    clock = ManualClock()
    key = SigningKey(b"s" * 32, "test")
    command = Command(id="c1", decision_id="d1", incident_id="i1", node="gpu-a", action=ActionKind.DRAIN_REQUEUE,
                      ts=clock.now(), expires_ts=clock.now() + 60, drain_reason="sentinel: i1 x")
    data = bytearray(codec.encode(CommandSigner(key).seal(command)))
    data[position % len(data)] ^= flip
    verifier = CommandVerifier([key], MemoryNonces(), clock, 3600.0)
    try:
        opened = verifier.open(bytes(data))
    except CommandRejected:
        return
    assert opened == command  # only a change the JSON reader ignores (e.g. whitespace) may pass


# ----- key files ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o666])
def test_a_key_file_others_can_read_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    path = key_file(tmp_path, mode=mode)
    with pytest.raises(ConfigError) as info:
        load_key(path)
    assert f"{mode:04o}" in str(info.value) and f"chmod 600 {path}" in str(info.value)


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_private_key_file_loads(tmp_path: Path, mode: int) -> None:
    key = load_key(key_file(tmp_path, mode=mode))
    assert key.secret == b"k" * 40 and len(key.key_id) == 16


def test_a_short_key_a_missing_file_and_a_symlink_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least 32"):
        load_key(key_file(tmp_path, content="short"))
    with pytest.raises(ConfigError, match="no such file"):
        load_key(str(tmp_path / "absent"))
    target = key_file(tmp_path, name="real")
    os.symlink(target, tmp_path / "link")
    with pytest.raises(ConfigError, match="cannot open"):
        load_key(str(tmp_path / "link"))


def test_keygen_writes_a_private_key_and_never_overwrites(tmp_path: Path) -> None:
    path = str(tmp_path / "new.key")
    os.umask(0o022)
    key = write_key(path)
    assert os.stat(path).st_mode & 0o777 == 0o600 and len(key.secret) == 64
    with pytest.raises(ConfigError, match="already exists"):
        write_key(path)


def test_the_separate_services_refuse_to_start_without_a_key_file(repo: Repository) -> None:
    with pytest.raises(ConfigError, match="security.key_file: required"):
        command_signing(from_mapping({}), ManualClock(), repo, require_key_file=True)


def test_the_separate_services_refuse_a_world_readable_key(repo: Repository, tmp_path: Path) -> None:
    config = from_mapping({"security": {"key_file": key_file(tmp_path, mode=0o644)}})
    with pytest.raises(ConfigError, match="chmod 600"):
        command_signing(config, ManualClock(), repo, require_key_file=True)


def test_a_previous_key_is_still_accepted_during_rotation(repo: Repository, tmp_path: Path) -> None:
    old, new = key_file(tmp_path, "old", content="o" * 40), key_file(tmp_path, "new", content="n" * 40)
    clock = ManualClock()
    old_signer, _ = command_signing(from_mapping({"security": {"key_file": old}}), clock, repo, True)
    _, verifier = command_signing(
        from_mapping({"security": {"key_file": new, "previous_key_files": [old]}}), clock, repo, True)
    command = Command(id="c", decision_id="d", incident_id="i", node="gpu-a", action=ActionKind.DRAIN_REQUEUE,
                      ts=clock.now(), expires_ts=clock.now() + 60, drain_reason="sentinel: i x")
    assert verifier.open(codec.encode(old_signer.seal(command))) == command


def test_the_embedded_pipeline_needs_no_key(repo: Repository) -> None:
    """`sentinel run` and `sentinel demo`: controller and actuator share the process and its random key."""
    clock = ManualClock()
    pipeline = build_pipeline(from_mapping({}), clock, Metrics(), repo)
    assert pipeline.controller.signer.key.source == "ephemeral"
    command = Command(id="c", decision_id="d", incident_id="i", node="gpu-a", action=ActionKind.DRAIN_REQUEUE,
                      ts=clock.now(), expires_ts=clock.now() + 60, drain_reason="sentinel: i x")
    sealed = pipeline.controller.signer.seal(command)
    assert pipeline.actuator.verifier.open(codec.encode(sealed)) == command
    assert isinstance(json.loads(codec.encode(sealed))["payload"], str)  # base64 inside JSON
    assert isinstance(sealed, SignedCommand)
