"""The tool service's metrics, through the OpenTelemetry API (docs/metrics.md lists them).

As :mod:`sandbox_workers.metrics` does for completions: every series carries
``worker_id``; the observable gauges read every :class:`ToolMetrics` registered
while its service runs, so a process with several workers reports each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from kafkaio import TopicPartition
from sandbox_workers.metrics import LATENCY_BUCKETS_MS
from sandbox_workers.tools.sessions import Held
from schemas import REBUILD_REASONS, TOOL_STATUSES, RebuildReason, ToolResult

__all__ = ["ToolMetrics"]

_meter = metrics.get_meter(__name__)
_calls = _meter.create_counter(
    "rewardbus.tools.calls", unit="{call}", description="tool calls answered, by status"
)
_records = _meter.create_counter(
    "rewardbus.tools.records",
    unit="{record}",
    description="tool-call records done (answered or dead-lettered)",
)
_rebuilds = _meter.create_counter(
    "rewardbus.tools.rebuilds", unit="{session}", description="sessions rebuilt by replay, by why"
)
_evictions = _meter.create_counter(
    "rewardbus.tools.evictions",
    unit="{session}",
    description="sessions evicted to stay within the live-session bound",
)
_exec_ms = _meter.create_histogram(
    "rewardbus.tools.execution",
    unit="ms",
    description="a call's own cell (or stateless program), by status",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_MS,
)
_replay_ms = _meter.create_histogram(
    "rewardbus.tools.replay",
    unit="ms",
    description="rebuilding a session by replaying its history",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_MS,
)
_queue_ms = _meter.create_histogram(
    "rewardbus.tools.queue_wait",
    unit="ms",
    description="a call's created_at until the worker starts it",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_MS,
)


class ToolMetrics:
    """One worker's tool-call measurements, labelled with its ``worker_id``.

    ``completion()`` and ``lags`` are what the shared fetch loop
    (:class:`~sandbox_workers.worker_loop.WorkerLoop`) reports through.
    """

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        # The held sessions, for the live-session and memory gauges (SessionTable.sessions).
        self.sessions: Callable[[], Sequence[Held]] = tuple
        self.lags: Mapping[TopicPartition, int] = {}
        self._labels = {"worker_id": worker_id}

    def __enter__(self) -> ToolMetrics:
        with _LIVE_LOCK:
            _LIVE.add(self)
        # Rare events' series start at 0, so rate() sees their first increase.
        _evictions.add(0, self._labels)
        for reason in REBUILD_REASONS:
            if reason:
                _rebuilds.add(0, {**self._labels, "reason": reason})
        for status in TOOL_STATUSES:
            _calls.add(0, {**self._labels, "status": status})
        return self

    def __exit__(self, *exc: object) -> None:
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def completion(self) -> None:
        """A tool-call record is done (its result or dead letter acknowledged)."""
        _records.add(1, self._labels)

    def result(self, result: ToolResult, rebuild_reason: RebuildReason) -> None:
        """A result was sent."""
        _calls.add(1, {**self._labels, "status": result.status})
        _queue_ms.record(result.queue_ms, self._labels)
        if result.status not in ("replay_needed", "rejected"):
            _exec_ms.record(result.exec_ms, {**self._labels, "status": result.status})
        if rebuild_reason:
            _rebuilds.add(1, {**self._labels, "reason": rebuild_reason})
            _replay_ms.record(result.replay_ms, self._labels)

    def gone(self, reason: RebuildReason) -> None:
        """A session left the table (the table's ``on_gone``)."""
        if reason == "evicted":
            _evictions.add(1, self._labels)


_LIVE: set[ToolMetrics] = set()
_LIVE_LOCK = threading.Lock()  # scrapes run in the exporter's thread


def _live() -> list[ToolMetrics]:
    with _LIVE_LOCK:
        return list(_LIVE)


def _observe_sessions(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(len(m.sessions()), {"worker_id": m.worker_id}) for m in _live()]


def _observe_memory(_: CallbackOptions) -> Iterable[Observation]:
    observations = []
    for m in _live():
        total = 0
        for held in m.sessions():
            try:
                total += held.session.memory_bytes()
            except OSError:  # closed meanwhile (its cgroup gone)
                continue
        observations.append(Observation(total, {"worker_id": m.worker_id}))
    return observations


def _observe_lag(_: CallbackOptions) -> Iterable[Observation]:
    return [
        Observation(lag, {"worker_id": m.worker_id, "topic": tp.topic, "partition": tp.partition})
        for m in _live()
        for tp, lag in m.lags.items()
    ]


_meter.create_observable_gauge(
    "rewardbus.tools.sessions",
    [_observe_sessions],
    unit="{session}",
    description="live sessions held",
)
_meter.create_observable_gauge(
    "rewardbus.tools.session_memory",
    [_observe_memory],
    unit="By",
    description="memory of every live session together",
)
_meter.create_observable_gauge(
    "rewardbus.tools.consumer_lag",
    [_observe_lag],
    unit="{record}",
    description="tool calls on the broker not yet fetched, per partition",
)
