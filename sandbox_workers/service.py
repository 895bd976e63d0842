"""The sandbox worker service: a consumer-group member that judges completions.

decode → resolve tests → execute (bounded) → emit reward → mark offset done.
An input offset is committed only after the reward for it (or its dead letter)
is acknowledged by the broker, so a crash redelivers and never loses; the
aggregator dedups the rare duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from sandbox_workers.cache import ClusterResultCache, LocalResultCache
from sandbox_workers.extract import extract_code
from sandbox_workers.fingerprint import fingerprint
from sandbox_workers.languages import lookup
from sandbox_workers.offsets import OffsetTracker
from sandbox_workers.problems import ProblemStore, ProblemTableBehind
from schemas import (
    CONTENT_TYPE,
    Completion,
    DeadLetter,
    KafkaSettings,
    RewardEvent,
    SchemaError,
    TestSuite,
    decode,
    encode,
    extract_context,
    inject_context,
    unpack_programs,
)

__all__ = ["CompletionRunner", "WorkerConfig", "WorkerStats", "run_worker"]

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)
meter = metrics.get_meter(__name__)
_rewards = meter.create_counter("rewardbus.worker.rewards", description="rewards emitted")
_dead_letters = meter.create_counter(
    "rewardbus.worker.dead_letters", description="inputs dead-lettered"
)
_queue_ms = meter.create_histogram(
    "rewardbus.worker.queue_wait", unit="ms", description="produce to fetch"
)
_exec_ms = meter.create_histogram(
    "rewardbus.worker.execution", unit="ms", description="judging time"
)
_scores = meter.create_histogram("rewardbus.worker.reward_score", description="reward distribution")


class CompletionRunner(Protocol):
    """What the service needs of the executor."""

    @property
    def languages(self) -> dict[str, str]:
        """Language name -> toolchain version (part of every cache fingerprint)."""
        ...

    async def run(self, completion: Completion, suite: TestSuite | None = None) -> RewardEvent: ...


@dataclass(frozen=True)
class WorkerConfig:
    """How one worker process consumes and judges."""

    group_id: str = "rewardbus-workers"
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    concurrency: int = 1
    max_in_flight: int = 0  # records fetched and not done; 0 -> 2 x concurrency
    commit_interval_s: float = 0.5
    drain_timeout_s: float = 30.0
    group_instance_id: str | None = None
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    produce_retry_backoff_s: float = 0.5
    # Retriable produce errors are retried this often before the input is dead-lettered.
    produce_attempts: int = 20
    # Transient judging faults (the problems table behind) are tried this often.
    transient_attempts: int = 3
    fetch_max_wait_ms: int = 20
    result_cache_bytes: int = 256 << 20  # 0 disables the result cache
    problem_store_bytes: int = 1 << 30
    # Anything besides the toolchain that shapes a reward (rewardbus and harness
    # versions): part of every cache fingerprint, so an upgrade never serves stale verdicts.
    runtime_version: str = ""

    @property
    def in_flight_limit(self) -> int:
        return self.max_in_flight or 2 * self.concurrency


@dataclass
class WorkerStats:
    """Counters a running worker exposes (and logs on exit)."""

    consumed: int = 0
    rewarded: int = 0
    dead_lettered: int = 0
    cache_hits: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    paused: int = 0


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: _Worker) -> None:
        self._worker = worker

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self._worker.drain(list(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("assigned %s", sorted(f"{tp.topic}:{tp.partition}" for tp in assigned))


class _Worker:
    def __init__(
        self,
        kafka: KafkaSettings,
        config: WorkerConfig,
        runner: CompletionRunner,
        stats: WorkerStats,
    ) -> None:
        self.kafka = kafka
        self.config = config
        self.runner = runner
        self.stats = stats
        self.tracker: OffsetTracker[TopicPartition] = OffsetTracker()
        self.executions = asyncio.Semaphore(config.concurrency)
        self.slot_freed = asyncio.Event()
        self.tasks: dict[asyncio.Task[None], TopicPartition] = {}
        self.problems: ProblemStore | None = None
        self.cache: ClusterResultCache | None = None
        self._last_commit = time.monotonic()
        self.consumer = AIOKafkaConsumer(
            **kafka.client_kwargs(),
            group_id=config.group_id,
            group_instance_id=config.group_instance_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_records=config.in_flight_limit,
            # Partitions are paused whenever the in-flight limit is reached; after a
            # resume the next fetch must not sit in a 500 ms (default) broker long-poll.
            fetch_max_wait_ms=config.fetch_max_wait_ms,
        )
        self.producer = AIOKafkaProducer(
            **kafka.client_kwargs(),
            acks="all",
            enable_idempotence=True,
            linger_ms=1,
            # A dead letter carries the original record, which may be a multi-MB suite.
            max_request_size=16 << 20,
        )

    # -- lifecycle -------------------------------------------------------------

    async def run(self, shutdown: Awaitable[None], ready: asyncio.Event | None) -> None:
        await self.producer.start()
        try:
            async with contextlib.AsyncExitStack() as stack:
                self.problems = await stack.enter_async_context(
                    ProblemStore(self.kafka, max_bytes=self.config.problem_store_bytes)
                )
                if self.config.result_cache_bytes > 0:
                    self.cache = await stack.enter_async_context(
                        ClusterResultCache(
                            self.kafka,
                            LocalResultCache(self.config.result_cache_bytes),
                            worker_id=self.config.worker_id,
                            producer=self.producer,  # puts ride with the rewards
                        )
                    )
                await self._consume(shutdown, ready)
        finally:
            await self.producer.stop()

    async def _consume(self, shutdown: Awaitable[None], ready: asyncio.Event | None) -> None:
        await self.consumer.start()
        self.consumer.subscribe([self.kafka.topics.completions], listener=_Rebalance(self))
        if ready is not None:
            ready.set()
        stop = asyncio.ensure_future(shutdown)
        try:
            await self._fetch_loop(stop)
        finally:
            stop.cancel()
            await asyncio.shield(self._leave())

    async def _leave(self) -> None:
        """Stop fetching, drain in-flight work within the deadline, commit, leave."""
        await self.drain(None)
        try:
            await self.consumer.stop()  # leaves the group so partitions move at once
        except KafkaError:
            log.exception("consumer stop failed")

    async def drain(self, partitions: list[TopicPartition] | None) -> None:
        """Wait for in-flight records (of ``partitions``, or all), then commit."""
        pending = [t for t, tp in self.tasks.items() if partitions is None or tp in partitions]
        if pending:
            _done, late = await asyncio.wait(pending, timeout=self.config.drain_timeout_s)
            for task in late:  # their offsets stay uncommitted: another member redoes them
                task.cancel()
            if late:
                log.warning("drain deadline passed: %d executions cancelled", len(late))
                await asyncio.gather(*late, return_exceptions=True)
        await self.commit()
        if partitions is not None:
            self.tracker.forget(partitions)

    # -- the loop --------------------------------------------------------------

    async def _fetch_loop(self, stop: asyncio.Future[None]) -> None:
        while not stop.done():
            await self._wait_for_room(stop)
            if stop.done():
                break
            room = self.config.in_flight_limit - len(self.tasks)
            batches = await self.consumer.getmany(timeout_ms=200, max_records=room)
            for tp, records in batches.items():
                for record in records:
                    self._start(tp, record)
            await self._commit_if_due()

    async def _commit_if_due(self) -> None:
        """Commit at most once per ``commit_interval_s``: an offset commit is a broker
        write, and committing per finished record cost more broker CPU than the record."""
        if time.monotonic() - self._last_commit >= self.config.commit_interval_s:
            await self.commit()

    async def _wait_for_room(self, stop: asyncio.Future[None]) -> None:
        """Backpressure: with the in-flight limit reached, pause fetching until a slot frees."""
        if len(self.tasks) < self.config.in_flight_limit:
            return
        assigned = list(self.consumer.assignment())
        self.consumer.pause(*assigned)
        self.stats.paused += 1
        try:
            while len(self.tasks) >= self.config.in_flight_limit and not stop.done():
                self.slot_freed.clear()
                freed = asyncio.ensure_future(self.slot_freed.wait())
                waiters: list[asyncio.Future[Any]] = [freed, stop]
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                freed.cancel()
                await self._commit_if_due()
        finally:
            self.consumer.resume(*[tp for tp in assigned if tp in self.consumer.assignment()])

    def _start(self, tp: TopicPartition, record: Any) -> None:
        self.stats.consumed += 1
        self.tracker.started(tp, record.offset)
        task = asyncio.create_task(self._handle(tp, record))
        self.tasks[task] = tp
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.pop(task, None)
        self.slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("record handler failed", exc_info=task.exception())

    async def commit(self) -> None:
        self._last_commit = time.monotonic()
        assigned = self.consumer.assignment()
        offsets = {tp: o for tp, o in self.tracker.committable().items() if tp in assigned}
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except KafkaError as exc:  # a rebalance raced us; the new owner redoes the rest
            log.warning("commit failed: %s", exc)
            return
        self.tracker.mark_committed(offsets)

    # -- one record ------------------------------------------------------------

    async def _handle(self, tp: TopicPartition, record: Any) -> None:
        attrs = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.destination.name": record.topic,
            "messaging.destination.partition.id": str(record.partition),
            "messaging.kafka.offset": record.offset,
            "messaging.consumer.group.name": self.config.group_id,
            "rewardbus.worker_id": self.config.worker_id,
        }
        with tracer.start_as_current_span(
            "judge completion",
            context=extract_context(record.headers),
            kind=SpanKind.CONSUMER,
            attributes=attrs,
        ) as span:
            await self._judge(record, span)
            # Only a record whose reward (or dead letter) the broker acknowledged is done:
            # a cancelled execution stays uncommitted and is redone by the partition's next owner.
            self.tracker.done(tp, record.offset)

    async def _judge(self, record: Any, span: trace.Span) -> None:
        queue_ms = max(0.0, time.time() * 1000 - record.timestamp)
        _queue_span(queue_ms)
        try:
            completion = decode(record.value, Completion)
        except SchemaError as exc:
            await self._dead_letter(record, exc.reason, "SchemaError", "decode")
            span.set_status(Status(StatusCode.ERROR, exc.reason))
            return
        span.set_attribute("rewardbus.sample_id", completion.sample_id)
        span.set_attribute("rewardbus.batch_id", completion.batch_id)
        reply = completion.reply_topic
        if reply is not None and not self.kafka.topics.is_reply_topic(reply):
            # A completion names its reward's destination: never let it write elsewhere.
            reason = (
                f"reply_topic {reply!r} is not a reply topic of this deployment "
                f"(it must start with {self.kafka.topics.replies_prefix!r})"
            )
            await self._dead_letter(record, reason, "InvalidReplyTopic", "decode")
            span.set_status(Status(StatusCode.ERROR, reason))
            return
        programs = unpack_programs(completion)
        span.set_attribute("rewardbus.programs", len(programs))
        await asyncio.gather(
            *(self._judge_program(record, index, one, queue_ms) for index, one in programs)
        )

    async def _judge_program(
        self, record: Any, index: int, completion: Completion, queue_ms: float
    ) -> None:
        event = await self._execute(record, completion)
        if event is None:
            return
        event = msgspec.structs.replace(
            event,
            queue_ms=round(queue_ms, 3),
            worker_id=self.config.worker_id,
            program_index=index,
        )
        span = trace.get_current_span()
        span.set_attribute("rewardbus.verdict", str(event.verdict))
        span.set_attribute("rewardbus.score", event.score)
        topic = completion.reply_topic or self.kafka.topics.rewards
        try:
            await self._emit_reward(event, topic)
        except _ProduceFailed as exc:
            # The reward cannot land (a reply topic whose client is gone, a record the
            # topic refuses): the input goes to the DLQ with why, and its partition moves on.
            await self._dead_letter(record, exc.reason, "ProduceFailed", "emit")

    async def _execute(self, record: Any, completion: Completion) -> RewardEvent | None:
        """Judge (or answer from the cache); failures become dead letters."""
        try:
            event, hit = await self._judge_with_retries(completion)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure becomes a dead letter, never a crash
            reason = getattr(exc, "reason", None) or f"{type(exc).__name__}: {exc}"
            if getattr(exc, "retriable", True):
                log.exception("judging %s failed", completion.sample_id)
            await self._dead_letter(record, str(reason), type(exc).__name__, "execute")
            return None
        if hit:
            self.stats.cache_hits += 1
        trace.get_current_span().set_attribute("rewardbus.cache_hit", hit)
        return event

    async def _judge_with_retries(self, completion: Completion) -> tuple[RewardEvent, bool]:
        """A transient fault (the problems table behind) is tried again, a bounded number
        of times, before it is let through to the dead-letter path."""
        for attempt in range(1, self.config.transient_attempts + 1):
            try:
                return await self._judge_or_hit(completion)
            except ProblemTableBehind as exc:
                if attempt == self.config.transient_attempts:
                    raise
                log.warning("%s (attempt %d); trying again", exc.reason, attempt)
                await asyncio.sleep(self.config.produce_retry_backoff_s * attempt)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _judge_or_hit(self, completion: Completion) -> tuple[RewardEvent, bool]:
        """resolve tests → cache lookup or bounded execution; (event, cache hit)."""
        if self.problems is None:
            raise RuntimeError("worker not started")
        if self.cache is None:  # no fingerprint needed, nor the inline suite's digest
            suite = await self.problems.resolve(completion)
            return await self._run_bounded(completion, suite), False
        suite, digest = await self.problems.resolve_with_digest(completion)
        key = self._fingerprint(completion, digest)
        if key is None:
            return await self._run_bounded(completion, suite), False
        return await self.cache.get_or_compute(
            key, completion, lambda: self._run_bounded(completion, suite)
        )

    async def _run_bounded(self, completion: Completion, suite: TestSuite) -> RewardEvent:
        async with self.executions:  # cache hits never hold an execution slot
            return await self.runner.run(completion, suite)

    def _fingerprint(self, completion: Completion, suite_digest: str) -> str | None:
        """The content key of this judgement, or None when it cannot be cached."""
        language = lookup(completion.language)
        if language is None:
            return None  # the executor reports the unknown language
        version = self.runner.languages.get(language.name)
        if version is None:
            return None
        code = completion.code if completion.code and completion.code.strip() else None
        if code is None:
            code = extract_code(completion.response or "", language.name)
        if not code:
            return None
        runtime = f"{version}|{self.config.runtime_version}"
        return fingerprint(language.name, code, suite_digest, completion.limits, runtime)

    async def _emit_reward(self, event: RewardEvent, topic: str) -> None:
        with tracer.start_as_current_span(
            "emit reward",
            kind=SpanKind.PRODUCER,
            attributes={"messaging.system": "kafka", "messaging.destination.name": topic},
        ):
            headers = inject_context([CONTENT_TYPE])
            await self._produce(topic, encode(event), event.batch_id.encode(), headers)
        self.stats.rewarded += 1
        self.stats.verdicts[str(event.verdict)] += 1
        attrs: dict[str, str | bool] = {"verdict": str(event.verdict), "cache_hit": event.cache_hit}
        _rewards.add(1, attrs)
        _queue_ms.record(event.queue_ms)
        if not event.cache_hit:
            _exec_ms.record(event.exec_ms, {"verdict": str(event.verdict)})
        _scores.record(event.score)

    async def _dead_letter(self, record: Any, reason: str, error_type: str, stage: str) -> None:
        letter = DeadLetter(
            source_topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=record.value or b"",
            reason=reason,
            error_type=error_type,
            stage=stage,
            service=f"sandbox-worker:{self.config.worker_id}",
        )
        log.warning(
            "dead letter %s:%d@%d: %s", record.topic, record.partition, record.offset, reason
        )
        # The input's offset waits on this record, and there is nowhere further to send it.
        await self._produce(
            self.kafka.topics.dlq, encode(letter), record.key, [CONTENT_TYPE], attempts=0
        )
        self.stats.dead_lettered += 1
        _dead_letters.add(1, {"stage": stage, "error_type": error_type})

    async def _produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        headers: list[tuple[str, bytes]],
        *,
        attempts: int | None = None,
    ) -> None:
        """Produce and wait for the ack (the offset waits on it).

        Retriable errors are retried ``attempts`` times (default: the config's), then
        :class:`_ProduceFailed`; a non-retriable error raises it at once. ``attempts=0``
        retries for ever: the dead-letter write, the last resort, uses that.
        """
        limit = self.config.produce_attempts if attempts is None else attempts
        tries = 0
        while True:
            tries += 1
            try:
                await self.producer.send_and_wait(topic, value, key=key, headers=headers)
            except KafkaError as exc:
                if not exc.retriable or (limit and tries >= limit):
                    reason = f"produce to {topic} failed after {tries} tries: {exc!r}"
                    raise _ProduceFailed(reason) from exc
                log.warning("produce to %s failed (%s); retrying", topic, exc)
                await asyncio.sleep(self.config.produce_retry_backoff_s)
            else:
                return


class _ProduceFailed(Exception):
    """A record could not be produced: a non-retriable error, or retries ran out."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _queue_span(queue_ms: float) -> None:
    """Record the time the record waited in Kafka (produce to fetch) as its own span."""
    end = time.time_ns()
    span = tracer.start_span(
        "queue wait",
        start_time=end - int(queue_ms * 1e6),
        attributes={"rewardbus.queue_ms": queue_ms},
    )
    span.end(end_time=end)


async def run_worker(
    kafka: KafkaSettings,
    config: WorkerConfig,
    runner: CompletionRunner,
    *,
    shutdown: Awaitable[None],
    ready: asyncio.Event | None = None,
    stats: WorkerStats | None = None,
) -> WorkerStats:
    """Consume completions and emit rewards until ``shutdown`` resolves, then drain and leave."""
    stats = stats if stats is not None else WorkerStats()
    worker = _Worker(kafka, config, runner, stats)
    await worker.run(shutdown, ready)
    log.info(
        "worker %s done: consumed=%d rewarded=%d dead_lettered=%d cache_hits=%d",
        config.worker_id,
        stats.consumed,
        stats.rewarded,
        stats.dead_lettered,
        stats.cache_hits,
    )
    return stats
