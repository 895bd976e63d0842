"""Trainer side: publish completions, batch manifests and shared test suites."""

from producers.humaneval import HumanEvalSample, build_batches, humaneval_samples
from producers.publisher import ProducerConfig, RolloutProducer

__all__ = [
    "HumanEvalSample",
    "ProducerConfig",
    "RolloutProducer",
    "build_batches",
    "humaneval_samples",
]
