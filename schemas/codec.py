"""MessagePack encoding and decoding: the only place where messages become bytes."""

from __future__ import annotations

import hashlib
from typing import Any, TypeVar

import msgspec

from schemas.errors import RewardbusError
from schemas.messages import SCHEMA_VERSION, TestSuite

__all__ = ["SchemaError", "decode", "decode_json", "encode", "encode_json", "suite_digest"]

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[Any, msgspec.msgpack.Decoder[Any]] = {}


class SchemaError(RewardbusError):
    """Bytes that are not a valid message of the expected type.

    ``reason`` says what is wrong; the message is never retriable, it belongs in
    the dead-letter topic.
    """


def encode(message: msgspec.Struct) -> bytes:
    """Encode one message struct as MessagePack."""
    return _encoder.encode(message)


def decode(data: bytes | None, message_type: type[T]) -> T:
    """Decode ``data`` as ``message_type`` or raise :class:`SchemaError`."""
    if data is None:
        raise SchemaError(f"empty record: expected a {message_type.__name__}")
    decoder = _decoders.get(message_type)
    if decoder is None:
        decoder = _decoders[message_type] = msgspec.msgpack.Decoder(message_type)
    try:
        message: T = decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise SchemaError(f"not a valid {message_type.__name__}: {exc}") from None
    except RecursionError:
        # Values nested deeper than the interpreter's recursion limit (a free-form
        # ``inputs`` list inside lists): the record's fault. Uncaught, it crashed every
        # worker the record was redelivered to.
        raise SchemaError(f"not a valid {message_type.__name__}: nested too deeply") from None
    version = getattr(message, "schema_version", SCHEMA_VERSION)
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"{message_type.__name__} has schema_version {version}; "
            f"this build understands up to {SCHEMA_VERSION}"
        )
    return message


def suite_digest(suite: TestSuite) -> str:
    """A stable content digest of a test suite (sha256 of its canonical encoding)."""
    canonical = msgspec.msgpack.Encoder(order="deterministic").encode(suite)
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def decode_json(data: str | bytes, message_type: type[T]) -> T:
    """Decode one JSON document (e.g. a line of a ``.jsonl`` file) as ``message_type``."""
    try:
        return msgspec.json.decode(data, type=message_type)
    except msgspec.DecodeError as exc:
        raise SchemaError(f"not a valid {message_type.__name__}: {exc}") from None
    except RecursionError:
        raise SchemaError(f"not a valid {message_type.__name__}: nested too deeply") from None


def encode_json(message: object) -> bytes:
    """Encode a message struct (or plain data) as compact JSON."""
    return msgspec.json.encode(message)
