"""Signed commands: only the controller can order the actuator to act.

Every ``Command`` travels inside a ``SignedCommand`` envelope: the command's exact encoding, a key id, a random
nonce, an expiry and an HMAC-SHA256 over all four. The actuator opens an envelope only if the key is known, the
signature matches, the expiry is in the future (and not further than ``security.max_command_ttl_s``), the
command inside is valid and agrees with the envelope, and the nonce was never seen before. Anything else raises
``CommandRejected`` with a low-cardinality ``reason`` (the metric label) and nothing is executed.

Keys come from a file that only its owner may read (mode 0600 or stricter; anything looser is refused at start).
``sentinel run`` and ``sentinel demo`` need no key file: controller and actuator share one process and a random
per-process key (``process_key``); the separate Kafka services refuse to start without ``security.key_file``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from sentinel import codec
from sentinel.clock import Clock
from sentinel.errors import CodecError, ConfigError, SentinelError
from sentinel.events import Command, SignedCommand

MIN_KEY_BYTES = 32
_DOMAIN = b"sentinel.command.v1"
REASONS = ("unsigned", "malformed", "unknown_key", "bad_signature", "expired", "invalid_command", "replayed")


@dataclass(frozen=True)
class SigningKey:
    secret: bytes = field(repr=False)
    source: str  # a path, or "ephemeral" for the per-process key

    @property
    def key_id(self) -> str:
        """Names the key on the wire without revealing it (so a verifier can hold several during rotation)."""
        return hashlib.sha256(b"sentinel key id\0" + self.secret).hexdigest()[:16]


@dataclass(frozen=True)
class Opened:
    """A verified envelope's command, with the nonce still to be recorded."""

    command: Command
    nonce: str
    expires_ts: float


class CommandRejected(SentinelError):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class NonceStore(Protocol):
    def remember_nonce(self, nonce: str, expires_ts: float, now: float) -> bool:
        """Record ``nonce`` until ``expires_ts``; False when it was already recorded (a replay)."""
        ...


class MemoryNonces:
    """Nonces held in memory until they expire: bounded by the commands' expiry, lost on restart (only for
    in-process pipelines and tests of our own; the services use the store)."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}

    def remember_nonce(self, nonce: str, expires_ts: float, now: float) -> bool:
        for old in [n for n, exp in self._seen.items() if exp < now]:
            del self._seen[old]
        if nonce in self._seen:
            return False
        self._seen[nonce] = expires_ts
        return True


def load_key(path: str, setting: str = "security.key_file") -> SigningKey:
    """Read a key file; refuse one that group or others may access, that is not a plain file, or too short."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise ConfigError(f"{setting}: {path}: no such file (create one with `sentinel keygen {path}`)") from None
    except OSError as exc:
        raise ConfigError(f"{setting}: {path}: cannot open: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())  # of the file we read, not of whatever the path names later
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{setting}: {path}: not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise ConfigError(
                f"{setting}: {path} has mode {mode:04o}; a signing key must be readable by its owner only "
                f"(run `chmod 600 {path}`)"
            )
        secret = handle.read(4096).strip()
    if len(secret) < MIN_KEY_BYTES:
        raise ConfigError(f"{setting}: {path}: key is {len(secret)} bytes; at least {MIN_KEY_BYTES} are required")
    return SigningKey(secret, path)


def write_key(path: str, text: str | None = None) -> SigningKey:
    """Create a new key file (mode 0600, never overwriting) holding 32 random bytes as hex (or ``text``, a key
    derived elsewhere: a node's key from the fleet key)."""
    if os.path.isdir(path):
        example = os.path.join(path, "command.key")
        raise ConfigError(f"{path}: is a directory; name the key file to create, e.g. {example}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"{path}: already exists; refusing to overwrite a key") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot create: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        os.fchmod(handle.fileno(), 0o600)  # whatever the umask
        handle.write((text if text is not None else secrets.token_hex(32)) + "\n")
    return load_key(path, setting=path)


_PROCESS_KEY: SigningKey | None = None


def process_key() -> SigningKey:
    """A random key that lives as long as this process: the one-process pipeline's zero-configuration key."""
    global _PROCESS_KEY
    if _PROCESS_KEY is None:
        _PROCESS_KEY = SigningKey(secrets.token_bytes(32), "ephemeral")
    return _PROCESS_KEY


def _mac(key: SigningKey, nonce: str, expires_ts: float, payload: bytes) -> str:
    message = b"\0".join((_DOMAIN, key.key_id.encode(), nonce.encode(), repr(float(expires_ts)).encode(), payload))
    return hmac.new(key.secret, message, hashlib.sha256).hexdigest()


class CommandSigner:
    def __init__(self, key: SigningKey) -> None:
        self.key = key

    def seal(self, command: Command) -> SignedCommand:
        payload = codec.encode(command)
        nonce = secrets.token_hex(16)
        return SignedCommand(key_id=self.key.key_id, nonce=nonce, expires_ts=command.expires_ts, payload=payload,
                             signature=_mac(self.key, nonce, command.expires_ts, payload))


class CommandVerifier:
    """Opens envelopes; every refusal raises ``CommandRejected`` before anything could act on the command."""

    def __init__(self, keys: Iterable[SigningKey], nonces: NonceStore, clock: Clock, max_ttl_s: float) -> None:
        self.keys = {k.key_id: k for k in keys}
        if not self.keys:
            raise ConfigError("security: no key to verify commands with")
        self.nonces = nonces
        self.clock = clock
        self.max_ttl_s = max_ttl_s

    def open(self, data: bytes) -> Command:
        """Check ``data`` and record its nonce; a second opening of the same envelope is refused as a replay."""
        opened = self.check(data)
        if not self.remember(opened):
            raise CommandRejected("replayed", f"nonce of command {opened.command.id} was already used")
        return opened.command

    def remember(self, opened: Opened) -> bool:
        """Record the envelope's nonce; False when it was recorded before (the same envelope again)."""
        return self.nonces.remember_nonce(opened.nonce, opened.expires_ts, self.clock.now())

    def check(self, data: bytes) -> Opened:
        """Every check but the nonce: key, signature, expiry, a valid command agreeing with its envelope. The
        actuator service records the command in its journal before it records the nonce, so an envelope seen
        again can be told apart: a command left unfinished resumes, a finished one is a replay."""
        opened = self.authentic(data)
        now = self.clock.now()
        if opened.expires_ts <= now:
            raise CommandRejected("expired", f"expired {now - opened.expires_ts:.0f} s ago")
        if opened.expires_ts - now > self.max_ttl_s:
            raise CommandRejected("expired", f"expiry {opened.expires_ts - now:.0f} s ahead exceeds "
                                             f"security.max_command_ttl_s ({self.max_ttl_s:.0f} s)")
        return opened

    def authentic(self, data: bytes) -> Opened:
        """The key, signature and command checks, not the expiry: what the actuator re-checks when it resumes a
        command from its journal (one already accepted is finished even past its expiry; a journal row written by
        anyone but the actuator, with no envelope or another command's, fails here)."""
        try:
            envelope = codec.decode(data)
        except CodecError as exc:
            raise CommandRejected("malformed", exc.reason) from None
        if isinstance(envelope, Command):
            raise CommandRejected("unsigned", f"bare command {envelope.id} without a signature")
        if not isinstance(envelope, SignedCommand):
            raise CommandRejected("malformed", f"expected a signed command, got {type(envelope).__name__}")
        key = self.keys.get(envelope.key_id)
        if key is None:
            raise CommandRejected("unknown_key", f"signed with key {envelope.key_id}, not one this actuator holds")
        expected = _mac(key, envelope.nonce, envelope.expires_ts, envelope.payload)
        if not hmac.compare_digest(expected, envelope.signature):
            raise CommandRejected("bad_signature", "signature does not match the content (forged or tampered)")
        try:
            command = codec.decode_as(envelope.payload, Command)
        except CodecError as exc:  # a validly signed but invalid command (e.g. a node name a shell would parse)
            raise CommandRejected("invalid_command", exc.reason) from None
        if command.expires_ts != envelope.expires_ts:
            raise CommandRejected("invalid_command", "command expiry differs from the signed expiry")
        return Opened(command, envelope.nonce, envelope.expires_ts)


def verification_keys(key_file: str, previous_key_files: Iterable[str]) -> list[SigningKey]:
    """The signing key first, then the previous keys still accepted while a rotation completes."""
    return [load_key(key_file), *(load_key(p, "security.previous_key_files") for p in previous_key_files)]


def key_for(key_file: str) -> SigningKey:
    return load_key(key_file) if key_file else process_key()

