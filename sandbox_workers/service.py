"""The sandbox worker service: a consumer-group member that judges completions.

decode → resolve tests → execute (bounded) → emit reward → mark offset done.
An input offset is committed only after the reward for it (or its dead letter)
is acknowledged by the broker, so a crash redelivers and never loses; the
aggregator dedups the rare duplicate.

Failures (the tree: :mod:`sandbox_workers.errors`). Input that does not decode,
names a foreign reply topic, or raises a non-retriable
:class:`~sandbox_workers.errors.SandboxWorkerError` goes to the DLQ with the
reason, and its offset moves on. A retriable one is tried again
(``transient_attempts``); if it persists, it is never dead-lettered: the record
stays uncommitted and the worker stops with the error, so the group redelivers
the record. Anything else is a bug in our code: logged with its traceback, the
worker stops the same way. Either stop drains the other in-flight records,
commits what is done and leaves the group; :func:`run_worker` then raises the
error (the CLI exits non-zero).

A record that keeps killing its worker (a bug it sets off, a crash, a wedge) is
quarantined: each start is counted in the attempts ledger before judging
(:mod:`sandbox_workers.attempts`), and once ``quarantine_after`` workers died on it
the next owner dead-letters it unjudged. Nothing a record carries can pin its
partition: rewards are summarised to fit their topic (:mod:`schemas.outcomes`), and
a response or program past ``max_program_chars`` is dead-lettered unread.
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
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from kafkaio import (
    AioClients,
    Clients,
    ConsumerOptions,
    DeadLetterWriter,
    KafkaIOError,
    ProduceError,
    ProducerOptions,
    Rebalance,
    Record,
    TopicPartition,
    partition_lags,
    running,
    send_with_retries,
    wait_for_topics,
)
from sandbox_workers.attempts import AttemptLedger, SuspectGate
from sandbox_workers.errors import SandboxWorkerError
from sandbox_workers.extract import program_of
from sandbox_workers.fingerprint import fingerprint
from sandbox_workers.languages import lookup
from sandbox_workers.metrics import WorkerMetrics
from sandbox_workers.offsets import OffsetTracker
from sandbox_workers.problems import ProblemStore
from sandbox_workers.result_cache import ClusterResultCache, LocalResultCache
from schemas import (
    CONTENT_TYPE,
    MAX_RECORD_BYTES,
    Completion,
    KafkaSettings,
    RewardEvent,
    SchemaError,
    TestSuite,
    Verdict,
    bounded_reward,
    decode,
    encode,
    extract_context,
    inject_context,
    is_canary_batch,
    unpack_programs,
)

__all__ = [
    "CompletionRunner",
    "RewardUndeliverable",
    "WorkerConfig",
    "WorkerStats",
    "run_worker",
]

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)


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
    # Failover after a kill -9 takes the session timeout plus one heartbeat: 6 s is the
    # broker's smallest allowed (group.min.session.timeout.ms); a 500 ms heartbeat tells
    # the survivors of a rebalance within half a second (tests/integration/test_faults.py).
    session_timeout_ms: int = 6_000
    # A static member (group_instance_id) keeps its partitions across a restart only if
    # it is back within its session timeout: a worker restart takes 2-6 s on a busy
    # machine, so static members get a longer one (and a dead one fails over that late).
    static_session_timeout_ms: int = 30_000
    heartbeat_interval_ms: int = 500
    # How long a starting worker waits for its topics to exist (a deployment creates
    # them in a job that may finish after the workers start); then TopicNotFound.
    topic_wait_s: float = 120.0
    produce_retry_backoff_s: float = 0.5
    # Retriable produce errors are retried this often before the input is dead-lettered.
    produce_attempts: int = 20
    # A retriable judging fault (the problems table behind) is tried this often before
    # the worker gives the record back to the group (it stops, the record uncommitted).
    transient_attempts: int = 3
    # A response, code or packed program longer than this is dead-lettered unread: no
    # model writes 4 Mi characters, and extracting, fingerprinting and jailing it would
    # hold the worker (the completions topic takes records up to 16 MiB for the suites).
    max_program_chars: int = 4 << 20
    # A record that was being judged when this many workers died (crashed, wedged,
    # killed) is dead-lettered unjudged by the next (sandbox_workers.attempts); 0: off.
    quarantine_after: int = 3
    fetch_max_wait_ms: int = 20
    # How often the consumer-lag gauge is refreshed (from the consumer's own state).
    lag_interval_s: float = 1.0
    result_cache_bytes: int = 256 << 20  # 0 disables the result cache
    problem_store_bytes: int = 1 << 30
    # Anything besides the toolchain that shapes a reward (rewardbus and harness
    # versions): part of every cache fingerprint, so an upgrade never serves stale verdicts.
    runtime_version: str = ""

    @property
    def in_flight_limit(self) -> int:
        return self.max_in_flight or 2 * self.concurrency

    @property
    def effective_session_timeout_ms(self) -> int:
        """The session timeout the consumer uses: longer for a static member."""
        if self.group_instance_id is not None:
            return self.static_session_timeout_ms
        return self.session_timeout_ms


@dataclass
class WorkerStats:
    """Counters a running worker exposes (and logs on exit)."""

    consumed: int = 0
    rewarded: int = 0
    dead_lettered: int = 0
    cache_hits: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    paused: int = 0


class RewardUndeliverable(SandboxWorkerError):
    """A reward could not land: its topic refused it, or retriable errors outlasted the retries.

    Not retriable (the retries are spent): the input goes to the DLQ with the reason,
    so that one unreachable destination (a reply topic whose client is gone, a record
    the topic refuses) does not pin its partition.
    """


class _Worker:
    def __init__(
        self,
        kafka: KafkaSettings,
        config: WorkerConfig,
        runner: CompletionRunner,
        stats: WorkerStats,
        clients: Clients,
    ) -> None:
        self.kafka = kafka
        self.config = config
        self.runner = runner
        self.stats = stats
        self.clients = clients
        self.tracker: OffsetTracker[TopicPartition] = OffsetTracker()
        self.executions = asyncio.Semaphore(config.concurrency)
        self.slot_freed = asyncio.Event()
        # Each record in flight, by the task judging it: (partition, offset).
        self.tasks: dict[asyncio.Task[None], tuple[TopicPartition, int]] = {}
        self.problems: ProblemStore | None = None
        self.cache: ClusterResultCache | None = None
        self.attempts: AttemptLedger | None = None
        self.suspects = SuspectGate()
        # What stopped the worker (a persistent retriable fault, or a bug), raised by run().
        self.failure: BaseException | None = None
        self._stopping: asyncio.Future[None] | None = None
        self._last_commit = time.monotonic()
        self.metrics = WorkerMetrics(config.worker_id, config.concurrency, runner.languages)
        self._last_lag = 0.0
        self.consumer = clients.consumer(
            ConsumerOptions(
                group_id=config.group_id,
                group_instance_id=config.group_instance_id,
                session_timeout_ms=config.effective_session_timeout_ms,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                max_poll_records=config.in_flight_limit,
                # Partitions are paused whenever the in-flight limit is reached; after a
                # resume the next fetch must not sit in a 500 ms (default) broker long-poll.
                fetch_max_wait_ms=config.fetch_max_wait_ms,
            )
        )
        self.producer = clients.producer(
            # A dead letter carries the original record, which may be a multi-MB suite.
            ProducerOptions(
                acks="all", idempotent=True, linger_ms=1, max_request_bytes=MAX_RECORD_BYTES
            )
        )
        self.dead_letters = DeadLetterWriter(
            self.producer, kafka.topics.dlq, service=f"sandbox-worker:{config.worker_id}"
        )

    # -- lifecycle -------------------------------------------------------------

    async def run(self, shutdown: Awaitable[None], ready: asyncio.Event | None) -> None:
        await self._await_topics()
        async with running(self.producer), contextlib.AsyncExitStack() as stack:
            stack.enter_context(self.metrics)  # its gauges live as long as the worker
            self.problems = await stack.enter_async_context(
                ProblemStore(
                    self.kafka, max_bytes=self.config.problem_store_bytes, clients=self.clients
                )
            )
            if self.config.result_cache_bytes > 0:
                self.cache = await stack.enter_async_context(
                    ClusterResultCache(
                        self.kafka,
                        LocalResultCache(self.config.result_cache_bytes),
                        worker_id=self.config.worker_id,
                        producer=self.producer,  # puts ride with the rewards
                        clients=self.clients,
                    )
                )
            if self.config.quarantine_after > 0:
                self.attempts = await stack.enter_async_context(
                    AttemptLedger(
                        self.clients,
                        self.producer,
                        self.kafka.topics.attempts,
                        worker_id=self.config.worker_id,
                    )
                )
            await self._consume(shutdown, ready)
        if self.failure is not None:
            raise self.failure

    async def _await_topics(self) -> None:
        """Until the topics it reads exist: a member that subscribes to a topic not in
        the cluster yet is assigned nothing until its next metadata refresh (minutes),
        which is how a deployment's workers started beside its topic job sat idle."""
        t = self.kafka.topics
        names = [t.completions, t.problems, t.rewards, t.dlq]
        if self.config.result_cache_bytes > 0:
            names.append(t.result_cache)
        if self.config.quarantine_after > 0:
            names.append(t.attempts)
        admin = self.clients.admin()
        async with running(admin):
            await wait_for_topics(admin, names, timeout_s=self.config.topic_wait_s)

    async def _consume(self, shutdown: Awaitable[None], ready: asyncio.Event | None) -> None:
        await self.consumer.start()
        # Before partitions move, what was fetched from them is drained and committed.
        listener = Rebalance(self.drain, self._assigned)
        self.consumer.subscribe([self.kafka.topics.completions], listener=listener)
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

    async def _assigned(self, assigned: frozenset[TopicPartition]) -> None:
        await _log_assignment(assigned)
        if self.attempts is not None:
            # Before any record of these partitions: what their last owner counted.
            await self.attempts.caught_up()

    def _stop(self) -> None:
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        """Stop the worker because of ``exc`` (the first such error is the one raised)."""
        if self.failure is None:
            self.failure = exc
        self._stop()

    async def _leave(self) -> None:
        """Stop fetching, drain in-flight work within the deadline, commit, leave."""
        await self.drain(None)
        try:
            await self.consumer.stop()  # leaves the group so partitions move at once
        except KafkaIOError:
            log.exception("consumer stop failed")

    async def drain(self, partitions: frozenset[TopicPartition] | None) -> None:
        """Wait for in-flight records (of ``partitions``, or all), then commit."""
        pending = [
            task
            for task, (tp, _offset) in self.tasks.items()
            if partitions is None or tp in partitions
        ]
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
            await self._sample_lag_if_due()

    async def _sample_lag_if_due(self) -> None:
        if time.monotonic() - self._last_lag >= self.config.lag_interval_s:
            self._last_lag = time.monotonic()
            self.metrics.lags = await partition_lags(self.consumer)

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

    def _start(self, tp: TopicPartition, record: Record) -> None:
        self.stats.consumed += 1
        self.tracker.started(tp, record.offset)
        task = asyncio.create_task(self._handle(tp, record))
        self.tasks[task] = (tp, record.offset)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        tp, offset = self.tasks.pop(task, (None, -1))
        self.slot_freed.set()
        exc = None if task.cancelled() else task.exception()
        if exc is None:
            return
        # The record was not marked done: it stays uncommitted, and the worker stops so
        # that the group redelivers it instead of anyone dead-lettering good input.
        where = f"{tp.topic}:{tp.partition}@{offset}" if tp is not None else "a record"
        if isinstance(exc, SandboxWorkerError) and exc.retriable:
            log.error("%s: %s persists; stopping, the record will be redelivered", where, exc)
        else:
            log.error(
                "%s: judging failed; stopping, the record will be redelivered", where, exc_info=exc
            )
        self._fail(exc)

    async def commit(self) -> None:
        self._last_commit = time.monotonic()
        assigned = self.consumer.assignment()
        offsets = {tp: o for tp, o in self.tracker.committable().items() if tp in assigned}
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except KafkaIOError as exc:  # a rebalance raced us; the new owner redoes the rest
            log.warning("commit failed: %s", exc.reason)
            return
        self.tracker.mark_committed(offsets)

    # -- one record ------------------------------------------------------------

    async def _handle(self, tp: TopicPartition, record: Record) -> None:
        attrs: dict[str, str | int] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.destination.name": record.topic,
            "messaging.destination.partition.id": str(record.partition),
            "messaging.kafka.offset": record.offset,
            "messaging.consumer.group.name": self.config.group_id,
            "rewardbus.worker_id": self.config.worker_id,
        }
        produced = extract_context(record.headers)
        _queue_span(record, produced)
        with tracer.start_as_current_span(
            "judge completion", context=produced, kind=SpanKind.CONSUMER, attributes=attrs
        ) as span:
            if self.attempts is None:
                await self._judge(record, span)
            else:
                await self._judge_admitted(tp, record, span)
            # Only a record whose reward (or dead letter) the broker acknowledged is done:
            # a cancelled execution stays uncommitted and is redone by the partition's next owner.
            self.tracker.done(tp, record.offset)
            self.metrics.completion()

    async def _judge_admitted(self, tp: TopicPartition, record: Record, span: trace.Span) -> None:
        """Judge a record, its start counted (a suspect alone); or quarantine it."""
        assert self.attempts is not None
        died = self.attempts.died_in(tp, record.offset)
        if died >= self.config.quarantine_after:
            await self._quarantine(tp, record, died, span)
            return
        async with self.suspects.hold(suspect=died > 0):
            await self.attempts.begin(tp, record.offset)
            await self._judge_counted(tp, record, span)

    async def _quarantine(
        self, tp: TopicPartition, record: Record, died: int, span: trace.Span
    ) -> None:
        assert self.attempts is not None
        reason = (
            f"quarantined: {died} workers died (crashed, wedged or were killed) while judging "
            f"this record; not judged again (quarantine_after={self.config.quarantine_after})"
        )
        log.error("%s:%d@%d %s", tp.topic, tp.partition, record.offset, reason)
        await self._dead_letter(record, reason, "Quarantined", "quarantine")
        await self.attempts.finish(tp, record.offset)
        span.set_status(Status(StatusCode.ERROR, reason))

    async def _judge_counted(self, tp: TopicPartition, record: Record, span: trace.Span) -> None:
        """Judge a record whose start the ledger counted, and settle the count.

        Done: forgotten. Handed back for the host's fault (a retriable error) or at the
        drain deadline: the start is undone. Anything else is a bug this record set
        off: the start stays counted, and the worker stops (see the module doc).
        """
        assert self.attempts is not None
        try:
            await self._judge(record, span)
        except SandboxWorkerError as exc:
            if exc.retriable:  # handed back to the group for a fault of the host, not its own
                await self.attempts.give_back(tp, record.offset)
            raise
        except asyncio.CancelledError:  # the drain deadline: handed back, it killed no one
            await self.attempts.give_back(tp, record.offset)
            raise
        await self.attempts.finish(tp, record.offset)

    async def _judge(self, record: Record, span: trace.Span) -> None:
        queue_ms = max(0.0, time.time() * 1000 - record.timestamp_ms)
        try:
            completion = decode(record.value, Completion)
        except SchemaError as exc:
            await self._dead_letter(record, exc.reason, "SchemaError", "decode")
            span.set_status(Status(StatusCode.ERROR, exc.reason))
            return
        span.set_attributes(_completion_attributes(completion))
        self.metrics.received(completion, queue_ms)
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
        oversized = _oversized(completion, self.config.max_program_chars)
        if oversized is not None:
            await self._dead_letter(record, oversized, "CompletionTooLarge", "decode")
            span.set_status(Status(StatusCode.ERROR, oversized))
            return
        programs = unpack_programs(completion)
        span.set_attribute("rewardbus.programs", len(programs))
        await asyncio.gather(
            *(self._judge_program(record, index, one, queue_ms) for index, one in programs)
        )

    async def _judge_program(
        self, record: Record, index: int, completion: Completion, queue_ms: float
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
        if event.verdict == Verdict.SANDBOX_ERROR:  # the judge's fault, not the program's
            span.set_status(Status(StatusCode.ERROR, f"sandbox_error: {event.message[:200]}"))
        topic = completion.reply_topic or self.kafka.topics.rewards
        try:
            await self._emit_reward(event, topic)
        except RewardUndeliverable as exc:
            # The reward cannot land (a reply topic whose client is gone, a record the
            # topic refuses): the input goes to the DLQ with why, and its partition moves on.
            await self._dead_letter(record, exc.reason, type(exc).__name__, "emit")
        else:
            self.metrics.reward(event, completion, record.timestamp_ms, time.time() * 1000)

    async def _execute(self, record: Record, completion: Completion) -> RewardEvent | None:
        """Judge (or answer from the cache); input that cannot be judged becomes a dead letter.

        Only our own errors are caught, and only a non-retriable one is dead-lettered
        (the input's fault). A retriable one that outlasted its retries, and anything
        that is not ours (a bug), propagate: the worker stops, the record uncommitted.
        """
        try:
            event, hit = await self._judge_with_retries(completion)
        except SandboxWorkerError as exc:
            if exc.retriable:
                raise
            await self._dead_letter(record, exc.reason, type(exc).__name__, "execute")
            return None
        if hit:
            self.stats.cache_hits += 1
        trace.get_current_span().set_attribute("rewardbus.cache_hit", hit)
        return event

    async def _judge_with_retries(self, completion: Completion) -> tuple[RewardEvent, bool]:
        """A retriable fault (the problems table behind) is tried again, a bounded number
        of times, before it is let through (to stop the worker: see the module doc)."""
        attempts = max(self.config.transient_attempts, 1)
        for attempt in range(1, attempts + 1):
            try:
                return await self._judge_or_hit(completion)
            except SandboxWorkerError as exc:
                if not exc.retriable or attempt == attempts:
                    raise
                log.warning("%s (attempt %d); trying again", exc.reason, attempt)
                await asyncio.sleep(self.config.produce_retry_backoff_s * attempt)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _judge_or_hit(self, completion: Completion) -> tuple[RewardEvent, bool]:
        """resolve tests → cache lookup or bounded execution; (event, cache hit)."""
        if self.problems is None:
            raise RuntimeError("worker not started")
        # A judge canary must run every time (a cached verdict would hide the drift it
        # watches for), and its result is not shared.
        if self.cache is None or is_canary_batch(completion.batch_id):
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
            self.metrics.executing += 1
            try:
                event = await self.runner.run(completion, suite)
            finally:
                self.metrics.executing -= 1
        # Before it is cached or sent: however many tests the suite has, the reward (and
        # its cache entry) must fit their topics' record limit (schemas.outcomes).
        return bounded_reward(event)

    def _fingerprint(self, completion: Completion, suite_digest: str) -> str | None:
        """The content key of this judgement, or None when it cannot be cached."""
        language = lookup(completion.language)
        if language is None:
            return None  # the executor reports the unknown language
        version = self.runner.languages.get(language.name)
        if version is None:
            return None
        code = program_of(completion, language.name)
        if code is None:
            return None
        runtime = f"{version}|{self.config.runtime_version}"
        return fingerprint(language.name, code, suite_digest, completion.limits, runtime)

    async def _emit_reward(self, event: RewardEvent, topic: str) -> None:
        attributes: dict[str, str | int | float] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.destination.name": topic,
            "messaging.kafka.message.key": event.batch_id,
            "rewardbus.sample_id": event.sample_id,
            "rewardbus.verdict": str(event.verdict),
            "rewardbus.score": event.score,
        }
        with tracer.start_as_current_span(
            "emit reward", kind=SpanKind.PRODUCER, attributes=attributes
        ) as span:
            headers = inject_context([CONTENT_TYPE])
            try:
                delivery = await send_with_retries(
                    self.producer,
                    topic,
                    encode(event),
                    key=event.batch_id.encode(),
                    headers=headers,
                    attempts=self.config.produce_attempts,
                    backoff_s=self.config.produce_retry_backoff_s,
                )
            except ProduceError as exc:
                raise RewardUndeliverable(exc.reason) from exc
            span.set_attribute("messaging.destination.partition.id", str(delivery.partition))
            span.set_attribute("messaging.kafka.offset", delivery.offset)
        self.stats.rewarded += 1
        self.stats.verdicts[str(event.verdict)] += 1

    async def _dead_letter(self, record: Record, reason: str, error_type: str, stage: str) -> None:
        # The input's offset waits on this record, and there is nowhere further to send
        # it: retriable errors are retried for ever; any other stops the worker.
        await self.dead_letters.write(
            record,
            reason=reason,
            error_type=error_type,
            stage=stage,
            backoff_s=self.config.produce_retry_backoff_s,
        )
        self.stats.dead_lettered += 1
        self.metrics.dead_letter(stage, error_type)
        span = trace.get_current_span()  # the record's "judge completion" span
        span.set_attribute("rewardbus.dead_letter.stage", stage)
        span.set_status(
            Status(StatusCode.ERROR, f"dead-lettered ({stage}, {error_type}): {reason}")
        )


def _oversized(completion: Completion, limit: int) -> str | None:
    """Why ``completion``'s program text is too long to judge, or None."""
    texts = {"response": completion.response or "", "code": completion.code or ""}
    texts |= {f"programs[{i}]": program for i, program in enumerate(completion.programs)}
    for name, text in texts.items():
        if len(text) > limit:
            return f"{name} is {len(text):,} characters; workers judge at most {limit:,}"
    return None


async def _log_assignment(assigned: frozenset[TopicPartition]) -> None:
    log.info("assigned %s", sorted(f"{tp.topic}:{tp.partition}" for tp in assigned))


def _queue_span(record: Record, produced: Context) -> None:
    """The time the record waited (its produce timestamp until judging starts), as a span.

    A sibling of "judge completion" under the producer's span, not its child: it
    ends where judging begins, and a child may not start before its parent.
    """
    end = time.time_ns()
    start = min(end, record.timestamp_ms * 1_000_000)
    span = tracer.start_span(
        "queue wait",
        context=produced,
        start_time=start,
        attributes={
            "rewardbus.queue_ms": round((end - start) / 1e6, 3),
            "messaging.destination.partition.id": str(record.partition),
            "messaging.kafka.offset": record.offset,
        },
    )
    span.end(end_time=end)


def _completion_attributes(completion: Completion) -> dict[str, str | int]:
    """What a span of this completion says about it (``rewardbus.*`` attributes)."""
    attributes: dict[str, str | int] = {
        "rewardbus.sample_id": completion.sample_id,
        "rewardbus.batch_id": completion.batch_id,
        "rewardbus.group_id": completion.group_id,
        "rewardbus.language": completion.language,
        "rewardbus.policy_version": completion.policy_version,
    }
    if completion.problem_id:
        attributes["rewardbus.problem_id"] = completion.problem_id
    return attributes


async def run_worker(
    kafka: KafkaSettings,
    config: WorkerConfig,
    runner: CompletionRunner,
    *,
    shutdown: Awaitable[None],
    ready: asyncio.Event | None = None,
    stats: WorkerStats | None = None,
    clients: Clients | None = None,
) -> WorkerStats:
    """Consume completions and emit rewards until ``shutdown`` resolves, then drain and leave.

    ``clients`` makes the Kafka clients (default: :class:`~kafkaio.AioClients` for
    ``kafka``; unit tests pass a :class:`~kafkaio.FakeBroker`). Raises what stopped the
    worker early, after
    it has drained, committed and left: a retriable
    :class:`~sandbox_workers.errors.SandboxWorkerError` that outlasted its retries, a
    dead letter the DLQ refused, or a bug; the records it had not finished are
    redelivered to the group.
    """
    stats = stats if stats is not None else WorkerStats()
    worker = _Worker(kafka, config, runner, stats, clients or AioClients(kafka))
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
