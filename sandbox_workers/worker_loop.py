"""The worker's loop: fetch completion records, hand each to the judge, commit what is done.

The tool service (:mod:`sandbox_workers.tools.service`) runs tool-call records
through the same loop, its handler in the judge's place and its own metrics
(:class:`LoopMetrics`).

It holds at most ``in_flight_limit`` records at a time (with the limit reached it
pauses its partitions until one finishes), commits at most once per
``commit_interval_s``, and samples its consumer lag for the metrics. An input
offset is committed only after the judge returned for it and for every offset
before it (its reward or dead letter acknowledged by the broker), so a crash
redelivers and never loses; the aggregator dedups the rare duplicate.

Before partitions move (a rebalance), and when the worker stops, the records in
flight are drained (past ``drain_timeout_s`` cancelled, their offsets left for
the next owner) and what is done is committed. A judge that raises (a retriable
fault that persisted, or a bug) stops the worker the same way: the record stays
uncommitted, so the group redelivers it, and :meth:`WorkerLoop.run` hands back
the error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from kafkaio import (
    Consumer,
    KafkaIOError,
    Rebalance,
    Record,
    TopicPartition,
    partition_lags,
)
from sandbox_workers.errors import SandboxWorkerError
from sandbox_workers.offsets import OffsetTracker
from sandbox_workers.worker_config import WorkerConfig, WorkerStats

__all__ = ["LoopMetrics", "WorkerLoop"]

log = logging.getLogger(__name__)

# Judges one record of a partition; returns once its outcome is acknowledged.
Judge = Callable[[TopicPartition, Record], Awaitable[None]]


class LoopMetrics(Protocol):
    """What the loop reports (the completion worker's metrics, or the tool service's)."""

    lags: Mapping[TopicPartition, int]

    def completion(self) -> None:
        """A record is done."""
        ...


class WorkerLoop:
    """Fetch, backpressure, commit cadence and lag sampling around a ``judge``.

    ``assigned`` is awaited on each assignment, before any record of the new
    partitions is judged. ``logger`` names the service in what the loop logs (its
    assignments, drains, failures): this module's for the completion worker.
    """

    def __init__(
        self,
        config: WorkerConfig,
        consumer: Consumer,
        *,
        judge: Judge,
        assigned: Callable[[], Awaitable[None]],
        stats: WorkerStats,
        metrics: LoopMetrics,
        logger: logging.Logger = log,
    ) -> None:
        self._log = logger
        self._config = config
        self._consumer = consumer
        self._judge = judge
        self._on_assigned = assigned
        self._stats = stats
        self._metrics = metrics
        self._tracker: OffsetTracker[TopicPartition] = OffsetTracker()
        self._slot_freed = asyncio.Event()
        # Each record in flight, by the task judging it: (partition, offset).
        self._tasks: dict[asyncio.Task[None], tuple[TopicPartition, int]] = {}
        # What stopped the worker (a persistent retriable fault, or a bug), returned by run().
        self._failure: BaseException | None = None
        self._stopping: asyncio.Future[None] | None = None
        self._last_commit = time.monotonic()
        self._last_lag = 0.0

    # -- lifecycle -------------------------------------------------------------

    async def run(
        self, topic: str, shutdown: Awaitable[None], ready: asyncio.Event | None
    ) -> BaseException | None:
        """Consume ``topic`` until ``shutdown`` resolves or a judgement fails; drain and leave.

        Returns what stopped the worker early (None: ``shutdown``).
        """
        await self._consumer.start()
        # Before partitions move, what was fetched from them is drained and committed.
        listener = Rebalance(self.drain, self._assigned)
        self._consumer.subscribe([topic], listener=listener)
        if ready is not None:
            ready.set()
        stopping = self._stopping = asyncio.get_running_loop().create_future()
        told = asyncio.ensure_future(shutdown)
        told.add_done_callback(lambda _: self._stop())
        try:
            await self._fetch_loop(stopping)
        finally:
            if told is not shutdown:  # our own wrapper, not the caller's future
                told.cancel()
            await asyncio.shield(self._leave())
        return self._failure

    async def _assigned(self, assigned: frozenset[TopicPartition]) -> None:
        self._log.info("assigned %s", sorted(f"{tp.topic}:{tp.partition}" for tp in assigned))
        await self._on_assigned()

    def _stop(self) -> None:
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        """Stop the worker because of ``exc`` (the first such error is the one returned)."""
        if self._failure is None:
            self._failure = exc
        self._stop()

    async def _leave(self) -> None:
        """Stop fetching, drain in-flight work within the deadline, commit, leave."""
        await self.drain(None)
        try:
            await self._consumer.stop()  # leaves the group so partitions move at once
        except KafkaIOError:
            self._log.exception("consumer stop failed")

    async def drain(self, partitions: frozenset[TopicPartition] | None) -> None:
        """Wait for in-flight records (of ``partitions``, or all), then commit."""
        pending = [
            task
            for task, (tp, _offset) in self._tasks.items()
            if partitions is None or tp in partitions
        ]
        if pending:
            _done, late = await asyncio.wait(pending, timeout=self._config.drain_timeout_s)
            for task in late:  # their offsets stay uncommitted: another member redoes them
                task.cancel()
            if late:
                self._log.warning("drain deadline passed: %d executions cancelled", len(late))
                await asyncio.gather(*late, return_exceptions=True)
        await self.commit()
        if partitions is not None:
            self._tracker.forget(partitions)

    # -- the loop --------------------------------------------------------------

    async def _fetch_loop(self, stop: asyncio.Future[None]) -> None:
        while not stop.done():
            await self._wait_for_room(stop)
            if stop.done():
                break
            room = self._config.in_flight_limit - len(self._tasks)
            batches = await self._consumer.getmany(timeout_ms=200, max_records=room)
            for tp, records in batches.items():
                for record in records:
                    self._start(tp, record)
            await self._commit_if_due()
            await self._sample_lag_if_due()

    async def _sample_lag_if_due(self) -> None:
        if time.monotonic() - self._last_lag >= self._config.lag_interval_s:
            self._last_lag = time.monotonic()
            self._metrics.lags = await partition_lags(self._consumer)

    async def _commit_if_due(self) -> None:
        """Commit at most once per ``commit_interval_s``: an offset commit is a broker
        write, and committing per finished record cost more broker CPU than the record."""
        if time.monotonic() - self._last_commit >= self._config.commit_interval_s:
            await self.commit()

    async def _wait_for_room(self, stop: asyncio.Future[None]) -> None:
        """Backpressure: with the in-flight limit reached, pause fetching until a slot frees."""
        if len(self._tasks) < self._config.in_flight_limit:
            return
        assigned = list(self._consumer.assignment())
        self._consumer.pause(*assigned)
        self._stats.paused += 1
        try:
            while len(self._tasks) >= self._config.in_flight_limit and not stop.done():
                self._slot_freed.clear()
                freed = asyncio.ensure_future(self._slot_freed.wait())
                waiters: list[asyncio.Future[Any]] = [freed, stop]
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                freed.cancel()
                await self._commit_if_due()
        finally:
            self._consumer.resume(*[tp for tp in assigned if tp in self._consumer.assignment()])

    def _start(self, tp: TopicPartition, record: Record) -> None:
        self._stats.consumed += 1
        self._tracker.started(tp, record.offset)
        task = asyncio.create_task(self._handle(tp, record))
        self._tasks[task] = (tp, record.offset)
        task.add_done_callback(self._finished)

    async def _handle(self, tp: TopicPartition, record: Record) -> None:
        await self._judge(tp, record)
        # Only a record whose reward (or dead letter) the broker acknowledged is done:
        # a cancelled execution stays uncommitted and is redone by the partition's next owner.
        self._tracker.done(tp, record.offset)
        self._metrics.completion()

    def _finished(self, task: asyncio.Task[None]) -> None:
        tp, offset = self._tasks.pop(task, (None, -1))
        self._slot_freed.set()
        exc = None if task.cancelled() else task.exception()
        if exc is None:
            return
        # The record was not marked done: it stays uncommitted, and the worker stops so
        # that the group redelivers it instead of anyone dead-lettering good input.
        where = f"{tp.topic}:{tp.partition}@{offset}" if tp is not None else "a record"
        if isinstance(exc, SandboxWorkerError) and exc.retriable:
            self._log.error("%s: %s persists; stopping, the record will be redelivered", where, exc)
        else:
            self._log.error(
                "%s: judging failed; stopping, the record will be redelivered", where, exc_info=exc
            )
        self._fail(exc)

    async def commit(self) -> None:
        """Commit every offset of an assigned partition that is done, with all before it."""
        self._last_commit = time.monotonic()
        assigned = self._consumer.assignment()
        offsets = {tp: o for tp, o in self._tracker.committable().items() if tp in assigned}
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except KafkaIOError as exc:  # a rebalance raced us; the new owner redoes the rest
            self._log.warning("commit failed: %s", exc.reason)
            return
        self._tracker.mark_committed(offsets)
