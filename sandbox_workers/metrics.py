"""The worker's metrics, through the OpenTelemetry API (the application configures the SDK).

Every series carries ``worker_id``. Names are stable: docs/metrics.md lists each with
its Prometheus name, and the dashboard and alert rules in ``infra/`` query them.

Instruments are process-wide (the API hands out one per name), while a process may
run several workers (the demo, tests): the observable gauges therefore read every
:class:`WorkerMetrics` registered in :data:`_LIVE` on each collection, and a worker
unregisters when it stops so its gauges vanish with it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from kafkaio import TopicPartition
from sandbox_workers.languages import lookup
from schemas import Completion, DeadLetterErrorType, DeadLetterStage, RewardEvent, Verdict

__all__ = [
    "LATENCY_BUCKETS_MS",
    "LENGTH_BUCKETS",
    "RESPONSE_LENGTH_ATTRIBUTE",
    "SCORE_BUCKETS",
    "WorkerMetrics",
    "language_label",
]

# From a warm-pool hit (~1 ms) to the longest limits a suite may set (minutes).
LATENCY_BUCKETS_MS = (
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0,
    1_000.0, 2_000.0, 5_000.0, 10_000.0, 30_000.0, 60_000.0, 120_000.0,
)  # fmt: skip
SCORE_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99, 1.0)
LENGTH_BUCKETS = (16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0)
# Completion.attributes key in which the trainer side reports the response's length
# in tokens (consumers.verl_reward sets it); the worker cannot count tokens itself.
RESPONSE_LENGTH_ATTRIBUTE = "response_length"

_meter = metrics.get_meter(__name__)
_completions = _meter.create_counter(
    "rewardbus.worker.completions",
    unit="{completion}",
    description="completion records judged to the end (rewards emitted or dead-lettered)",
)
_rewards = _meter.create_counter(
    "rewardbus.worker.rewards", unit="{reward}", description="rewards emitted, by verdict"
)
_cache_hits = _meter.create_counter(
    "rewardbus.worker.cache_hits", unit="{reward}", description="rewards served by the cache"
)
_sandbox_errors = _meter.create_counter(
    "rewardbus.worker.sandbox_errors",
    unit="{reward}",
    description="rewards with verdict sandbox_error (an infrastructure fault, not the code's)",
)
_dead_letters = _meter.create_counter(
    "rewardbus.worker.dead_letters", unit="{record}", description="inputs dead-lettered"
)
_queue_ms = _meter.create_histogram(
    "rewardbus.worker.queue_wait",
    unit="ms",
    description="produce to fetch",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_MS,
)
_exec_ms = _meter.create_histogram(
    "rewardbus.worker.execution",
    unit="ms",
    description="judging time of an execution (cache hits excluded)",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_MS,
)
_latency_ms = _meter.create_histogram(
    "rewardbus.worker.reward_latency",
    unit="ms",
    description="completion produced to its reward acknowledged by the broker",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_MS,
)
_scores = _meter.create_histogram(
    "rewardbus.worker.reward_score",
    description="reward distribution (score 0..1)",
    explicit_bucket_boundaries_advisory=SCORE_BUCKETS,
)
_lengths = _meter.create_histogram(
    "rewardbus.worker.response_length",
    unit="{token}",
    description="response length in tokens, where the trainer side reports it",
    explicit_bucket_boundaries_advisory=LENGTH_BUCKETS,
)


class WorkerMetrics:
    """One worker's measurements, labelled with its ``worker_id``."""

    def __init__(self, worker_id: str, concurrency: int, languages: Iterable[str] = ()) -> None:
        self.worker_id = worker_id
        self.languages = tuple(languages)
        self.concurrency = max(concurrency, 1)
        self.executing = 0
        # Replaced whole (never mutated) so a scrape thread reads a consistent dict.
        self.lags: Mapping[TopicPartition, int] = {}
        self._labels = {"worker_id": worker_id}

    def __enter__(self) -> WorkerMetrics:
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._zero()
        return self

    def _zero(self) -> None:
        """Counters of rare events start at 0: a series that first appears at 1 is an
        increase no rate() or increase() sees, and a dashboard would find no series."""
        _completions.add(0, self._labels)
        for language in self.languages:
            labels = {**self._labels, "language": language}
            _cache_hits.add(0, labels)
            _sandbox_errors.add(0, labels)

    def __exit__(self, *exc: object) -> None:
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def completion(self) -> None:
        """A completion record is done (its rewards or its dead letter acknowledged)."""
        _completions.add(1, self._labels)

    def received(self, completion: Completion, queue_ms: float) -> None:
        """A completion was decoded: its queue wait and (if reported) response length."""
        _queue_ms.record(queue_ms, self._labels)
        length = _response_length(completion)
        if length is not None:
            _lengths.record(length, {**self._labels, "language": language_label(completion)})

    def reward(
        self, event: RewardEvent, completion: Completion, produced_ms: float, now_ms: float
    ) -> None:
        """A reward was acknowledged by the broker (``*_ms``: wall clock, epoch ms)."""
        verdict = str(event.verdict)
        labels = {**self._labels, "language": language_label(completion)}
        _rewards.add(1, {**labels, "verdict": verdict, "cache_hit": event.cache_hit})
        if event.cache_hit:
            _cache_hits.add(1, labels)
        else:
            _exec_ms.record(event.exec_ms, {**labels, "verdict": verdict})
        if event.verdict == Verdict.SANDBOX_ERROR:
            _sandbox_errors.add(1, labels)
        _scores.record(event.score, labels)
        _latency_ms.record(max(0.0, now_ms - produced_ms), self._labels)

    def dead_letter(self, stage: DeadLetterStage, error_type: DeadLetterErrorType) -> None:
        """An input went to the DLQ."""
        _dead_letters.add(1, {**self._labels, "stage": stage, "error_type": error_type})


def language_label(completion: Completion) -> str:
    """The language's canonical name: any alias a completion uses maps to one series,
    and a name no plug-in knows to ``unknown`` (labels must not grow without bound)."""
    language = lookup(completion.language)
    return language.name if language is not None else "unknown"


def _response_length(completion: Completion) -> float | None:
    raw = completion.attributes.get(RESPONSE_LENGTH_ATTRIBUTE)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None  # a free-form attribute: a bad value is not the judgement's problem
    return value if value >= 0 else None


_LIVE: set[WorkerMetrics] = set()
_LIVE_LOCK = threading.Lock()  # scrapes run in the exporter's thread


def _live() -> list[WorkerMetrics]:
    with _LIVE_LOCK:
        return list(_LIVE)


def _observe_live(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(1, {"worker_id": w.worker_id}) for w in _live()]


def _observe_concurrency(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(w.concurrency, {"worker_id": w.worker_id}) for w in _live()]


def _observe_in_flight(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(w.executing, {"worker_id": w.worker_id}) for w in _live()]


def _observe_utilisation(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(w.executing / w.concurrency, {"worker_id": w.worker_id}) for w in _live()]


def _observe_lag(_: CallbackOptions) -> Iterable[Observation]:
    return [
        Observation(lag, {"worker_id": w.worker_id, "topic": tp.topic, "partition": tp.partition})
        for w in _live()
        for tp, lag in w.lags.items()
    ]


_meter.create_observable_gauge(
    "rewardbus.worker.live", [_observe_live], unit="{worker}", description="1 per running worker"
)
_meter.create_observable_gauge(
    "rewardbus.worker.concurrency",
    [_observe_concurrency],
    unit="{execution}",
    description="execution slots",
)
_meter.create_observable_gauge(
    "rewardbus.worker.in_flight",
    [_observe_in_flight],
    unit="{execution}",
    description="executions running now",
)
_meter.create_observable_gauge(
    "rewardbus.worker.utilisation",
    [_observe_utilisation],
    unit="1",
    description="execution slots in use (0..1)",
)
_meter.create_observable_gauge(
    "rewardbus.worker.consumer_lag",
    [_observe_lag],
    unit="{record}",
    description="completions on the broker not yet fetched, per partition",
)
