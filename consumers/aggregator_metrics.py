"""The aggregator's metrics, through the OpenTelemetry API (the application configures the SDK).

Names are stable: docs/metrics.md lists each with its Prometheus name. Series carry
``aggregator`` (the instance's service name) so several aggregators in one process
do not overwrite each other's gauges.

:class:`RewardTrend` is the pure core behind the reward-mean gauges: a training step
is a scored batch, and whether the mean fell five steps in a row is a question about
the order of batches, which Prometheus (sampling on its own clock) cannot answer;
the aggregator, which emits the batches in order, can.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from kafkaio import TopicPartition
from schemas import ScoredBatch

__all__ = ["AggregatorMetrics", "RewardTrend", "batch_reward_mean"]

SCORE_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99, 1.0)


def batch_reward_mean(batch: ScoredBatch) -> float | None:
    """Mean score of the samples that carry training signal (present, not masked)."""
    scores = [s.score for s in batch.samples if s.present and not s.masked]
    return sum(scores) / len(scores) if scores else None


@dataclass
class RewardTrend:
    """The last batch's reward mean and how many batches in a row it has fallen.

    A fall is a mean strictly below the previous batch's; anything else resets the
    streak to 0 (the same rule as the train demo's ``reward_falling`` alert).
    """

    last: float | None = None
    falls: int = 0

    def add(self, mean: float) -> int:
        """Take the next batch's mean; return the streak of falls it ends."""
        self.falls = self.falls + 1 if self.last is not None and mean < self.last else 0
        self.last = mean
        return self.falls


_meter = metrics.get_meter(__name__)
_reward_means = _meter.create_histogram(
    "rewardbus.aggregator.batch_reward_mean",
    description="reward mean of each scored batch (present, unmasked samples)",
    explicit_bucket_boundaries_advisory=SCORE_BUCKETS,
)


class AggregatorMetrics:
    """One aggregator instance's gauges (its counters stay in the aggregator)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.trend = RewardTrend()
        self.open_batches = 0
        # Replaced whole (never mutated) so a scrape thread reads a consistent dict.
        self.lags: Mapping[TopicPartition, int] = {}

    def register(self) -> None:
        """Report this instance's gauges from now on."""
        with _LIVE_LOCK:
            _LIVE.add(self)

    def unregister(self) -> None:
        """Stop reporting them (the instance stopped)."""
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def scored(self, batch: ScoredBatch) -> None:
        """A scored batch was acknowledged: its reward mean feeds the trend."""
        mean = batch_reward_mean(batch)
        if mean is None:
            return  # no sample carries signal: not a step of the trend
        self.trend.add(mean)
        _reward_means.record(mean, {"aggregator": self.name})


_LIVE: set[AggregatorMetrics] = set()
_LIVE_LOCK = threading.Lock()  # scrapes run in the exporter's thread


def _live() -> list[AggregatorMetrics]:
    with _LIVE_LOCK:
        return list(_LIVE)


def _observe_mean(_: CallbackOptions) -> Iterable[Observation]:
    return [
        Observation(a.trend.last, {"aggregator": a.name})
        for a in _live()
        if a.trend.last is not None
    ]


def _observe_falls(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(a.trend.falls, {"aggregator": a.name}) for a in _live()]


def _observe_open(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(a.open_batches, {"aggregator": a.name}) for a in _live()]


def _observe_lag(_: CallbackOptions) -> Iterable[Observation]:
    return [
        Observation(lag, {"aggregator": a.name, "topic": tp.topic, "partition": tp.partition})
        for a in _live()
        for tp, lag in a.lags.items()
    ]


_meter.create_observable_gauge(
    "rewardbus.aggregator.reward_mean",
    [_observe_mean],
    description="reward mean of the last scored batch",
)
_meter.create_observable_gauge(
    "rewardbus.aggregator.reward_mean_falls",
    [_observe_falls],
    unit="{batch}",
    description="scored batches in a row whose reward mean fell below the one before",
)
_meter.create_observable_gauge(
    "rewardbus.aggregator.open_batches",
    [_observe_open],
    unit="{batch}",
    description="batches being assembled",
)
_meter.create_observable_gauge(
    "rewardbus.aggregator.consumer_lag",
    [_observe_lag],
    unit="{record}",
    description="manifests and rewards on the broker not yet fetched, per partition",
)
