"""Learner side: the stream aggregator, its batch assembly logic and the scored-batch client.

``run_aggregator`` consumes manifests and rewards and emits ``ScoredBatch``es;
``ScoredBatches`` is what a learner reads them with, and ``LearnerSource`` joins
them with the rollouts held for them (``consumers.verl_batch``, which needs the
verl extra and is not imported here, turns a pair into a verl ``DataProto``);
``BatchAssembler``, ``grpo_advantages`` and ``plan_batch`` are the broker-free
logic underneath.

Errors: one root, :class:`ConsumerError` (``reason``, ``retriable``); the tree
and what each means: :mod:`consumers.errors`::

    ConsumerError
    ├── AggregatorError             input topics missing or not co-partitioned
    ├── InvalidMessageError         decoded, but cannot be aggregated → the DLQ
    ├── ScoredBatchBufferFullError  get() had to hold too many other batches
    ├── LearnerSourceFullError      hold() with max_in_flight rollouts already held
    └── VerlInputError              a ground truth that is no test suite
"""

from consumers.advantages import grpo_advantages
from consumers.aggregator import run_aggregator
from consumers.assembler import (
    AssemblerCounters,
    AssemblerLimits,
    BatchAssembler,
    InvalidMessageError,
    ManifestOutcome,
    ReadyBatch,
    RewardOutcome,
    build_scored_batch,
)
from consumers.client import ScoredBatchBufferFullError, ScoredBatches
from consumers.config import AggregatorConfig
from consumers.errors import ConsumerError
from consumers.learner import (
    BatchConverter,
    LearnerBatch,
    LearnerSource,
    LearnerSourceFullError,
    PositionedSource,
    ScoredBatchSource,
)
from consumers.learner_plan import (
    LearnerCounters,
    MaskReason,
    SamplePlan,
    StalenessPolicy,
    masked_uid,
    plan_batch,
)
from consumers.position import StreamPosition
from consumers.state_store import AggregatorError

__all__ = [
    "AggregatorConfig",
    "AggregatorError",
    "AssemblerCounters",
    "AssemblerLimits",
    "BatchAssembler",
    "BatchConverter",
    "ConsumerError",
    "InvalidMessageError",
    "LearnerBatch",
    "LearnerCounters",
    "LearnerSource",
    "LearnerSourceFullError",
    "ManifestOutcome",
    "MaskReason",
    "PositionedSource",
    "ReadyBatch",
    "RewardOutcome",
    "SamplePlan",
    "ScoredBatchBufferFullError",
    "ScoredBatchSource",
    "ScoredBatches",
    "StalenessPolicy",
    "StreamPosition",
    "build_scored_batch",
    "grpo_advantages",
    "masked_uid",
    "plan_batch",
    "run_aggregator",
]
