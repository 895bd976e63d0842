"""The aggregator's persisted state: records of its compacted state topic.

Not a contract between services (only the aggregator reads it back), but it is
bytes on a topic, and bytes live in ``schemas``. One batch is stored as one
``BatchRecord`` under the batch key plus one ``SampleRecord`` per received sample
under its own key, so a reward costs one small write instead of a rewrite of the
whole batch. A tombstone (a ``None`` value) deletes a key.
"""

from __future__ import annotations

import msgspec

from schemas.codec import SchemaError
from schemas.messages import SCHEMA_VERSION, BatchManifest, Verdict

__all__ = [
    "AggregatorRecord",
    "BatchRecord",
    "SampleRecord",
    "decode_state",
    "encode_state",
    "state_key",
]


class BatchRecord(msgspec.Struct, frozen=True, kw_only=True, tag="batch", tag_field="kind"):
    """One batch's header.

    Before its manifest arrives the batch is *pending* (``manifest`` is None). Once
    its ScoredBatch has been acknowledged by the broker, ``emitted_at`` is set and
    the manifest is dropped: the record only remembers that late rewards for this
    batch are to be ignored.
    """

    batch_id: str
    first_seen: float
    manifest: BatchManifest | None = None
    # The effective deadline (the manifest's, or a default); 0 while pending.
    deadline: float = 0.0
    duplicates: int = 0
    emitted_at: float = 0.0
    schema_version: int = SCHEMA_VERSION


class SampleRecord(msgspec.Struct, frozen=True, kw_only=True, tag="sample", tag_field="kind"):
    """The first reward received for one sample, reduced to what scoring needs."""

    batch_id: str
    sample_id: str
    verdict: Verdict
    received_at: float
    group_id: str = ""
    score: float = 0.0
    passed: int = 0
    total: int = 0
    cache_hit: bool = False
    policy_version: int = 0
    # W3C traceparent of the span that aggregated this reward: the batch span
    # links to it, even after a restart.
    traceparent: str = ""
    schema_version: int = SCHEMA_VERSION


AggregatorRecord = BatchRecord | SampleRecord

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[AggregatorRecord] = msgspec.msgpack.Decoder(AggregatorRecord)


def state_key(batch_id: str, sample_id: str | None = None) -> bytes:
    """The state-topic key of a batch header, or of one sample of that batch.

    Keys are msgpack arrays so that no separator character can make two keys collide.
    """
    parts = [batch_id] if sample_id is None else [batch_id, sample_id]
    return _encoder.encode(parts)


def encode_state(record: AggregatorRecord) -> bytes:
    """Encode one state record."""
    return _encoder.encode(record)


def decode_state(data: bytes | None) -> AggregatorRecord:
    """Decode one state record or raise :class:`SchemaError`."""
    if data is None:
        raise SchemaError("empty record: expected an aggregator state record")
    try:
        record = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise SchemaError(f"not a valid aggregator state record: {exc}") from None
    if record.schema_version > SCHEMA_VERSION:
        raise SchemaError(
            f"aggregator state has schema_version {record.schema_version}; "
            f"this build understands up to {SCHEMA_VERSION}"
        )
    return record
