"""Sealed records: findings and action results carry the signature of the service that produced them.

A command is signed by the controller (``sentinel.actuator.signing``), but the controller acts on findings and
results it reads off the broker: a finding forged by anyone who can produce to the findings topic would make the
controller itself sign a drain (issue 38). So the detector seals every finding and the actuator every result in a
``SealedRecord``: the record's exact encoding and an HMAC-SHA256 over the record kind, the key id and the
payload. The key is derived from the service key (``security.key_file``) for that kind alone, so a finding's
signature is never a valid result's or command's. The controller opens each one with ``Opener``; an unsealed,
forged or mis-kinded record raises ``RecordRefused`` (a ``CodecError``: it is dead-lettered with its reason and
counted in ``sentinel_records_refused_total``, never acted on).

No nonce and no expiry: a finding or result delivered twice is already a no-op (their ids are unique in the
store), so a replayed genuine record only restates what its service once said.

The controller seals each command it puts in its outbox the same way (kind ``command``): the outbox signs and
sends a row only when its seal opens and holds that very command, so a row written into the store by hand is
refused (issue 38, item 4).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import Generic, TypeVar

from sentinel import codec
from sentinel.actuator.signing import SigningKey
from sentinel.errors import CodecError
from sentinel.events import ActionResult, Command, Finding, SealedRecord

R = TypeVar("R", Finding, ActionResult, Command)

KINDS: dict[type, str] = {Finding: "finding", ActionResult: "result", Command: "command"}
REASONS = ("unsealed", "unknown_key", "bad_signature", "wrong_kind", "tampered")


class RecordRefused(CodecError):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.refusal = reason


def _derived(key: SigningKey, kind: str) -> bytes:
    return hmac.new(key.secret, b"sentinel.actuator.sealed.v1\0" + kind.encode(), hashlib.sha256).digest()


def _mac(secret: bytes, kind: str, key_id: str, payload: bytes) -> str:
    return hmac.new(secret, b"\0".join((kind.encode(), key_id.encode(), payload)), hashlib.sha256).hexdigest()


class Sealer(Generic[R]):
    """Seals records of one kind with the service key."""

    def __init__(self, key: SigningKey, kind: type[R]) -> None:
        self.kind = KINDS[kind]
        self.key_id = key.key_id
        self._secret = _derived(key, self.kind)

    def seal(self, record: R) -> bytes:
        payload = codec.encode(record)
        return codec.encode(SealedRecord(key_id=self.key_id, payload=payload,
                                         signature=_mac(self._secret, self.kind, self.key_id, payload)))


class Opener(Generic[R]):
    """Opens sealed records of one kind; ``keys``: the service key first, then previous ones during a rotation."""

    def __init__(self, keys: Iterable[SigningKey], kind: type[R]) -> None:
        self.type: type[R] = kind
        self.kind = KINDS[kind]
        self._secrets = {k.key_id: _derived(k, self.kind) for k in keys}

    def open(self, data: bytes) -> R:
        envelope = codec.decode(data)  # CodecError for anything that is not a record
        if not isinstance(envelope, SealedRecord):
            raise RecordRefused("unsealed", f"a bare {type(envelope).__name__} record; {self.kind}s must be "
                                "sealed by the service that produced them")
        secret = self._secrets.get(envelope.key_id)
        if secret is None:
            raise RecordRefused("unknown_key", f"sealed with key {envelope.key_id}, not one this service holds")
        if not hmac.compare_digest(_mac(secret, self.kind, envelope.key_id, envelope.payload), envelope.signature):
            raise RecordRefused("bad_signature", f"not a {self.kind} sealed with this key (forged or tampered)")
        record = codec.decode(envelope.payload)
        if not isinstance(record, self.type):  # cannot happen with an honest sealer: kinds have their own keys
            raise RecordRefused("wrong_kind", f"expected a {self.kind}, got {type(record).__name__}")
        return record


def inside(data: bytes, kind: type[R]) -> R:
    """The record inside a sealed message, seal not checked: for tools that read the topic (benchmarks, tests),
    never for acting on it."""
    envelope = codec.decode_as(data, SealedRecord)
    return codec.decode_as(envelope.payload, kind)
