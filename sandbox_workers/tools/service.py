"""The tool service: the worker group's member that answers tool calls of multi-turn rollouts.

fetch (:class:`~sandbox_workers.worker_loop.WorkerLoop`, the completion worker's own
loop: backpressure, drain, commit after the reply) → order per session → decode →
check the reply topic → run (:class:`~sandbox_workers.tools.calls.ToolCalls`: the
session table and the replay protocol of :mod:`schemas.tools`) → reply → offset done.

It consumes ``Topics.tool_calls`` in a consumer group of its own (the worker's
group id plus ``.tools``), beside the completion worker in the same process. Calls
are keyed by session, so one session's calls come from one partition in order; they
run one at a time, in that order, while other sessions' calls run concurrently (at
most ``ToolConfig.concurrency`` cells at once). A result goes to the call's
``reply_topic``, which must be a reply topic of this deployment.

Failures: a record that does not decode, or names a foreign reply topic, or whose
result its reply topic refuses, goes to the DLQ with the reason; its offset moves on.
What a cell does, and a session that faults, is a result (:mod:`~sandbox_workers.tools.calls`).
When partitions move away, their sessions are closed: the next owner rebuilds them
from the caller's history.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from kafkaio import (
    AioClients,
    Clients,
    DeadLetterWriter,
    ProduceError,
    Producer,
    Record,
    TopicPartition,
    delivered_attributes,
    process_attributes,
    running,
    send_attributes,
    send_with_retries,
    wait_for_topics,
)
from sandbox_workers.judgement import CompletionRunner
from sandbox_workers.record_judge import queue_span
from sandbox_workers.tools.calls import ToolCalls
from sandbox_workers.tools.metrics import ToolMetrics
from sandbox_workers.tools.session import SessionFactory
from sandbox_workers.tools.sessions import SessionTable
from sandbox_workers.worker_config import WorkerConfig, WorkerStats
from sandbox_workers.worker_loop import WorkerLoop
from schemas import (
    CONTENT_TYPE,
    DeadLetterErrorType,
    DeadLetterStage,
    KafkaSettings,
    SchemaError,
    ToolCall,
    ToolResult,
    Topics,
    decode,
    encode,
    extract_context,
    inject_context,
)

__all__ = ["ToolConfig", "ToolService", "run_tool_service"]

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)


@dataclass(frozen=True)
class ToolConfig:
    """How many sessions a worker holds and how many cells it runs at once."""

    max_sessions: int = 500
    # Cells are short and mostly wait on nothing of the worker's: with 4 at once, 32
    # sessions on two workers queued for a slot (round trip p50 24 ms; 14 ms with 16).
    concurrency: int = 16
    # Records fetched and not answered: calls queued behind their session's last one count.
    max_in_flight: int = 0  # 0 -> 8 x concurrency

    @property
    def in_flight_limit(self) -> int:
        return self.max_in_flight or 8 * self.concurrency


class ToolService:
    """Answers tool-call records; everything it needs is handed to it, built and started."""

    def __init__(
        self,
        *,
        topics: Topics,
        group_id: str,
        calls: ToolCalls,
        producer: Producer,
        dead_letters: DeadLetterWriter,
        worker: WorkerConfig,
        metrics: ToolMetrics,
    ) -> None:
        self._topics = topics
        self._group_id = group_id
        self._calls = calls
        self._producer = producer
        self._dead_letters = dead_letters
        self._worker = worker
        self._metrics = metrics
        # Per session key, the done-future of its last record started: the next waits on it.
        self._tails: dict[bytes | None, asyncio.Future[None]] = {}

    async def handle(self, tp: TopicPartition, record: Record) -> None:
        """Answer ``record`` after every earlier record of its session; return once the
        result (or dead letter) is acknowledged."""
        previous = self._tails.get(record.key)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tails[record.key] = done
        try:
            if previous is not None:
                await previous
            await self._handle(tp, record)
        finally:
            done.set_result(None)
            if self._tails.get(record.key) is done:
                del self._tails[record.key]

    async def _handle(self, tp: TopicPartition, record: Record) -> None:
        attributes = {
            **process_attributes(record, self._group_id),
            "rewardbus.worker_id": self._worker.worker_id,
        }
        produced = extract_context(record.headers)
        queue_span(record, produced)
        with tracer.start_as_current_span(
            "tool call",
            context=produced,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
        ) as span:
            call = await self._decoded(record, span)
            if call is None:
                return
            span.set_attribute("rewardbus.session_id", call.session_id)
            span.set_attribute("rewardbus.seq", call.seq)
            outcome = await self._calls.run(call, partition=tp.partition)
            result = outcome.result
            span.set_attributes(
                {
                    "rewardbus.tool.status": result.status,
                    "rewardbus.tool.rebuilt": result.rebuilt,
                    "rewardbus.queue_ms": result.queue_ms,
                }
            )
            if result.status == "sandbox_error":
                span.set_status(Status(StatusCode.ERROR, f"sandbox_error: {result.message[:200]}"))
            try:
                await self._reply(result, call.reply_topic)
            except ProduceError as exc:
                await self._dead_letter(record, exc.reason, "RewardUndeliverable", "emit")
                return
            self._metrics.result(result, outcome.rebuild_reason)

    async def _decoded(self, record: Record, span: trace.Span) -> ToolCall | None:
        """The call, or None once it has been dead-lettered."""
        try:
            call = decode(record.value, ToolCall)
        except SchemaError as exc:
            await self._dead_letter(record, exc.reason, "SchemaError", "decode")
            return None
        if not self._topics.is_reply_topic(call.reply_topic):
            # A call names its result's destination: never let it write elsewhere.
            reason = (
                f"reply_topic {call.reply_topic!r} is not a reply topic of this deployment "
                f"(it must start with {self._topics.replies_prefix!r})"
            )
            await self._dead_letter(record, reason, "InvalidReplyTopic", "validate")
            return None
        return call

    async def _reply(self, result: ToolResult, topic: str) -> None:
        with tracer.start_as_current_span(
            "emit tool result",
            kind=SpanKind.PRODUCER,
            attributes=send_attributes(topic, key=result.session_id),
        ) as span:
            delivery = await send_with_retries(
                self._producer,
                topic,
                encode(result),
                key=result.session_id.encode(),
                headers=inject_context([CONTENT_TYPE]),
                attempts=self._worker.produce_attempts,
                backoff_s=self._worker.produce_retry_backoff_s,
            )
            span.set_attributes(delivered_attributes(delivery))

    async def _dead_letter(
        self,
        record: Record,
        reason: str,
        error_type: DeadLetterErrorType,
        stage: DeadLetterStage,
    ) -> None:
        await self._dead_letters.write(
            record,
            reason=reason,
            error_type=error_type,
            stage=stage,
            backoff_s=self._worker.produce_retry_backoff_s,
        )
        trace.get_current_span().set_status(
            Status(StatusCode.ERROR, f"dead-lettered ({stage}, {error_type}): {reason}")
        )

    def assigned(self, assignment: frozenset[TopicPartition]) -> None:
        """Close the sessions of partitions no longer assigned (their new owner rebuilds them)."""
        kept = {tp.partition for tp in assignment if tp.topic == self._topics.tool_calls}
        closed = self._calls.table.keep_partitions(kept)
        if closed:
            log.info("closed %d tool sessions of partitions that moved away", closed)


async def run_tool_service(
    kafka: KafkaSettings,
    worker: WorkerConfig,
    tools: ToolConfig,
    *,
    factory: SessionFactory,
    runner: CompletionRunner,
    shutdown: Awaitable[None],
    ready: asyncio.Event | None = None,
    clients: Clients | None = None,
) -> WorkerStats:
    """Answer tool calls until ``shutdown`` resolves, then drain, close the sessions and leave.

    ``factory`` starts live sessions (the jail); ``runner`` runs stateless calls (the
    worker's executor). Raises what stopped the service early (a dead letter the DLQ
    refused, or a bug), after it has drained and left.
    """
    stats = WorkerStats()
    clients = clients or AioClients(kafka)
    group_id = f"{worker.group_id}.tools"
    loop_config = dataclasses.replace(
        worker,
        group_id=group_id,
        concurrency=tools.concurrency,
        max_in_flight=tools.in_flight_limit,
    )
    consumer = clients.consumer(worker.consumer_options(group_id, tools.in_flight_limit))
    producer = clients.producer(worker.producer_options())
    admin = clients.admin()
    async with running(admin):
        names = [kafka.topics.tool_calls, kafka.topics.dlq]
        await wait_for_topics(admin, names, timeout_s=worker.topic_wait_s)
    metrics = ToolMetrics(worker.worker_id)
    table = SessionTable(tools.max_sessions, on_gone=metrics.gone)
    metrics.sessions = table.sessions
    calls = ToolCalls(
        table=table,
        factory=factory,
        runner=runner,
        worker_id=worker.worker_id,
        concurrency=tools.concurrency,
    )
    async with running(producer):
        service = ToolService(
            topics=kafka.topics,
            group_id=group_id,
            calls=calls,
            producer=producer,
            dead_letters=DeadLetterWriter(
                producer, kafka.topics.dlq, service=f"tool-service:{worker.worker_id}"
            ),
            worker=worker,
            metrics=metrics,
        )

        async def assigned() -> None:
            service.assigned(consumer.assignment())

        with metrics:
            loop = WorkerLoop(
                loop_config,
                consumer,
                judge=service.handle,
                assigned=assigned,
                stats=stats,
                metrics=metrics,
                logger=log,  # its assignments and drains, told apart from the completion loop's
            )
            try:
                failure = await loop.run(kafka.topics.tool_calls, shutdown, ready)
            finally:
                await asyncio.shield(table.aclose())
    if failure is not None:
        raise failure
    log.info("tool service %s done: %d calls", worker.worker_id, stats.consumed)
    return stats
