"""Wire encoding of ``sentinel.events`` records: msgspec JSON, validated on decode.

JSON rather than MessagePack: ``sentinel-bench codec`` measured both (docs/benchmarks.md) and JSON is within a
small factor while staying readable with any Kafka console tool. Decoding checks the tag, every field's type
and constraints (finite numbers, name patterns, ranges) and the schema version; anything wrong raises
``CodecError`` with a reason and nothing else.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from sentinel.errors import CodecError
from sentinel.events import SCHEMA_VERSION, WireRecord

R = TypeVar("R", bound=msgspec.Struct)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(WireRecord)

MAX_MESSAGE_BYTES = 4 * 1024 * 1024


def encode(record: WireRecord) -> bytes:
    """Encode one record. Records built in our code are trusted; the decoder is the gate."""
    return _encoder.encode(record)


def decode(data: bytes) -> WireRecord:
    """Decode any wire record; raise ``CodecError`` for anything that is not a valid current record."""
    return _checked(_decoder, data)


def decode_as(data: bytes, kind: type[R]) -> R:
    """Decode a record that must be of type ``kind`` (e.g. the telemetry topic carries only samples).

    Goes through the tagged union rather than a decoder for ``kind`` alone: that one would accept a message
    with no ``type`` tag at all.
    """
    record = _checked(_decoder, data)
    if not isinstance(record, kind):
        raise CodecError(f"expected a {kind.__name__} record, got {type(record).__name__}")
    return record


class Projection(Generic[R]):
    """Decodes a projection of one record type: a tagged Struct with the record's tag, ``v`` and a subset of its
    fields under the same names and constraints (e.g. ``detector.sample_view.SampleView``). Fields it does not
    name are skipped without building objects; the same checks as ``decode_as`` apply to the rest. ``other``: any
    second tagged record type, so that the tag is required (a tagged Struct decoded alone accepts a message
    without one)."""

    def __init__(self, kind: type[R], other: type[msgspec.Struct]) -> None:
        self.kind = kind
        self._decoder = msgspec.json.Decoder(kind | other)  # type: ignore[operator]

    def decode(self, data: bytes) -> R:
        record = _checked(self._decoder, data)
        if not isinstance(record, self.kind):
            raise CodecError(f"expected a {self.kind.__name__} record, got {type(record).__name__}")
        return record


def _checked(decoder: msgspec.json.Decoder, data: bytes) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(f"expected bytes, got {type(data).__name__}")
    if len(data) > MAX_MESSAGE_BYTES:
        raise CodecError(f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
    try:
        record = decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise CodecError(f"invalid record: {exc}") from None
    except msgspec.DecodeError as exc:
        raise CodecError(f"malformed message: {exc}") from None
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:  # defensive: never leak another type
        raise CodecError(f"undecodable message: {type(exc).__name__}: {exc}") from None
    if record.v != SCHEMA_VERSION:
        raise CodecError(f"unsupported schema version {record.v} (this build reads {SCHEMA_VERSION})")
    return record
