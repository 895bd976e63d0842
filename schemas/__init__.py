"""The wire contract of rewardbus: message structs, msgpack codec, topics, headers.

This package imports nothing else of rewardbus; every other package imports it.
:class:`RewardbusError` is the base of every package's error root (``reason``,
``retriable``); this package's own root is :class:`SchemaError`.
"""

from schemas.attempts import Attempt, attempt_key
from schemas.cache import CachedResult
from schemas.canary import CANARY_BATCH_PREFIX, is_canary_batch
from schemas.codec import SchemaError, decode, decode_json, encode, encode_json, suite_digest
from schemas.errors import RewardbusError
from schemas.headers import CONTENT_TYPE, Headers, extract_context, header, inject_context
from schemas.messages import (
    COMPARE_MODES,
    SCHEMA_VERSION,
    AssertSuite,
    BatchManifest,
    CheckerProgram,
    CheckerSuite,
    Compare,
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
    program_sample_id,
    unpack_programs,
)
from schemas.outcomes import BoundedOutcomes, bound_outcomes, bounded_reward
from schemas.settings import KafkaSettings
from schemas.state import (
    AggregatorRecord,
    BatchRecord,
    SampleRecord,
    decode_state,
    encode_state,
    state_key,
)
from schemas.topics import (
    MAX_RECORD_BYTES,
    REPLICATED,
    REPLY_TOPIC,
    TOPIC_TABLE,
    Partitioning,
    Replication,
    TopicRole,
    Topics,
    TopicSettings,
)

__all__ = [
    "CANARY_BATCH_PREFIX",
    "COMPARE_MODES",
    "CONTENT_TYPE",
    "MAX_RECORD_BYTES",
    "REPLICATED",
    "REPLY_TOPIC",
    "SCHEMA_VERSION",
    "TOPIC_TABLE",
    "AggregatorRecord",
    "AssertSuite",
    "Attempt",
    "BatchManifest",
    "BatchRecord",
    "BoundedOutcomes",
    "CachedResult",
    "CheckerProgram",
    "CheckerSuite",
    "Compare",
    "Completion",
    "DeadLetter",
    "GroupStats",
    "Headers",
    "IoSuite",
    "KafkaSettings",
    "Limits",
    "Partitioning",
    "ProblemRecord",
    "Replication",
    "RewardEvent",
    "RewardbusError",
    "SampleRecord",
    "SchemaError",
    "ScoredBatch",
    "ScoredSample",
    "TestOutcome",
    "TestSuite",
    "TopicRole",
    "TopicSettings",
    "Topics",
    "Verdict",
    "attempt_key",
    "bound_outcomes",
    "bounded_reward",
    "decode",
    "decode_json",
    "decode_state",
    "encode",
    "encode_json",
    "encode_state",
    "extract_context",
    "header",
    "inject_context",
    "is_canary_batch",
    "program_sample_id",
    "state_key",
    "suite_digest",
    "unpack_programs",
]
