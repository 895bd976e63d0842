"""Trainer side: publish completions, batch manifests and shared test suites.

``BatchWindow`` bounds how many batches the publisher may have in flight.
"""

from producers.humaneval import HumanEvalSample, build_batches, humaneval_samples
from producers.publisher import ProducerConfig, RolloutProducer
from producers.window import BatchWindow

__all__ = [
    "BatchWindow",
    "HumanEvalSample",
    "ProducerConfig",
    "RolloutProducer",
    "build_batches",
    "humaneval_samples",
]
