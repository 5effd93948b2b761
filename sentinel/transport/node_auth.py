"""Per-node identity on telemetry (issue 38): each node's agent authenticates what it sends with a key of its own.

Without it anyone who can produce to the telemetry or logs topic can speak for any node (a forged Xid 79 for a
real node drains it). Each agent holds only its node key, derived from a fleet key and the node name
(``node_secret``); the detector holds the fleet key, derives the key of the node a message claims to come from
(the message key, which the agent sets to its node name) and refuses the message unless the MAC matches and the
record inside names that same node. A stolen node key speaks for that node only.

Framing, cheap enough for the detector's hot path (no base64, the record's JSON untouched)::

    b"\\x1fSN1" + HMAC-SHA256(node key, payload) (32 bytes) + payload

``open`` raises ``NodeRefused`` (a ``CodecError``: a dead letter with the reason, counted in
``sentinel_telemetry_refused_total{reason}``): ``unauthenticated`` (no frame), ``no_node`` (no message key),
``bad_mac`` (forged, tampered, or another node's key). ``payload`` strips a frame unverified, for tools and for
a detector that holds no fleet key (which then accepts what it cannot check, as before, and says so at start).
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict

from sentinel.errors import CodecError

MAGIC = b"\x1fSN1"
_MAC = 32
_HEAD = len(MAGIC) + _MAC
_DOMAIN = b"sentinel.node.v1\0"
REASONS = ("unauthenticated", "no_node", "bad_mac", "node_mismatch")
MAX_CACHED = 200_000  # node keys kept derived (the largest fleets have tens of thousands of nodes)


class NodeRefused(CodecError):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.refusal = reason


def node_secret(fleet_secret: bytes, node: str) -> bytes:
    """The key of ``node``: what ``sentinel keygen --node`` writes (as hex) for that node's agent."""
    return hmac.new(fleet_secret, _DOMAIN + node.encode(), hashlib.sha256).hexdigest().encode()


class NodeSigner:
    """The agent's side: frames each message with its node key."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def frame(self, payload: bytes) -> bytes:
        return MAGIC + hmac.new(self._secret, payload, hashlib.sha256).digest() + payload


class NodeVerifier:
    """The detector's side: opens a framed message with the key of the node it claims to come from."""

    def __init__(self, fleet_secrets: list[bytes]) -> None:
        self._fleet = fleet_secrets  # the current fleet key first, then previous ones during a rotation
        self._keys: OrderedDict[str, list[bytes]] = OrderedDict()

    def _node_keys(self, node: str) -> list[bytes]:
        keys = self._keys.get(node)
        if keys is None:
            keys = [node_secret(fleet, node) for fleet in self._fleet]
            self._keys[node] = keys
            if len(self._keys) > MAX_CACHED:
                self._keys.popitem(last=False)
        return keys

    def open(self, node: str | None, value: bytes) -> bytes:
        """The payload of ``value``, sent by ``node`` (the message key); ``NodeRefused`` otherwise."""
        if not value.startswith(MAGIC) or len(value) < _HEAD:
            raise NodeRefused("unauthenticated", "message without a node signature (agent.node_key_file unset, or "
                              "not from a Sentinel agent)")
        if not node:
            raise NodeRefused("no_node", "message without a key naming its node")
        payload = memoryview(value)[_HEAD:]
        mac = value[len(MAGIC):_HEAD]
        for key in self._node_keys(node):
            if hmac.compare_digest(hmac.new(key, payload, hashlib.sha256).digest(), mac):
                return bytes(payload)
        raise NodeRefused("bad_mac", f"not signed with {node}'s key (forged, tampered, or another node's key)")


def payload(value: bytes) -> bytes:
    """``value`` without its node frame, unverified (tools, and a detector without a fleet key)."""
    return value[_HEAD:] if value.startswith(MAGIC) and len(value) >= _HEAD else value
