"""The wire contract of rewardbus: message structs, msgpack codec, topics, headers.

This package imports nothing else of rewardbus; every other package imports it.
"""

from schemas.codec import SchemaError, decode, decode_json, encode, encode_json, suite_digest
from schemas.headers import CONTENT_TYPE, Headers, extract_context, header, inject_context
from schemas.messages import (
    SCHEMA_VERSION,
    AssertSuite,
    BatchManifest,
    CheckerProgram,
    CheckerSuite,
    Completion,
    DeadLetter,
    GroupStats,
    IoSuite,
    Limits,
    ProblemRecord,
    RewardEvent,
    ScoredBatch,
    ScoredSample,
    TestOutcome,
    TestSuite,
    Verdict,
)
from schemas.settings import KafkaSettings
from schemas.topics import Topics

__all__ = [
    "CONTENT_TYPE",
    "SCHEMA_VERSION",
    "AssertSuite",
    "BatchManifest",
    "CheckerProgram",
    "CheckerSuite",
    "Completion",
    "DeadLetter",
    "GroupStats",
    "Headers",
    "IoSuite",
    "KafkaSettings",
    "Limits",
    "ProblemRecord",
    "RewardEvent",
    "SchemaError",
    "ScoredBatch",
    "ScoredSample",
    "TestOutcome",
    "TestSuite",
    "Topics",
    "Verdict",
    "decode",
    "decode_json",
    "encode",
    "encode_json",
    "extract_context",
    "header",
    "inject_context",
    "suite_digest",
]
