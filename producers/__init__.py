"""Trainer side: publish completions, batch manifests and shared test suites.

``BatchWindow`` bounds how many batches the publisher may have in flight.

Errors: one root, :class:`ProducerError` (``reason``, ``retriable``)::

    ProducerError
    └── PublishError   the broker did not take a record (retriable as the broker says)
"""

from producers.errors import ProducerError, PublishError
from producers.humaneval import HumanEvalSample, build_batches, humaneval_samples
from producers.publisher import ProducerConfig, RolloutProducer
from producers.window import BatchWindow

__all__ = [
    "BatchWindow",
    "HumanEvalSample",
    "ProducerConfig",
    "ProducerError",
    "PublishError",
    "RolloutProducer",
    "build_batches",
    "humaneval_samples",
]
