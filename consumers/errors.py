"""The root of every learner-side error: ``reason`` says why, ``retriable`` whether trying
again can help. The whole tree::

    ConsumerError
    ├── AggregatorError             a deployment problem the aggregator cannot work around
    │                               (input topics missing or not co-partitioned)
    ├── InvalidMessageError         decoded, but cannot be aggregated → the DLQ
    ├── ScoredBatchBufferFullError  get() had to hold more other batches than max_buffered
    ├── LearnerSourceFullError      hold() with max_in_flight rollouts already held
    └── VerlInputError              a ground truth that is no test suite (the sample gets
                                    failure_score, flagged)

None is retriable as is. Broker failures are the seam's
:class:`~kafkaio.KafkaIOError` (never the client library's own); undecodable bytes are
:class:`~schemas.SchemaError`.
"""

from __future__ import annotations

from schemas import RewardbusError

__all__ = ["ConsumerError"]


class ConsumerError(RewardbusError):
    """Root of the consumers package's errors: a :class:`~schemas.RewardbusError`."""
