"""One completion record, judged: decode → admit → resolve → cache or run → emit → dead-letter.

:class:`RecordJudge` returns once the record's rewards (or its dead letter) are
acknowledged by the broker; the loop (:mod:`sandbox_workers.worker_loop`) then
marks its offset done. What it does with each failure (the tree:
:mod:`sandbox_workers.errors`): input that does not decode, names a foreign reply
topic, carries a program past ``max_program_chars``, or raises a non-retriable
:class:`~sandbox_workers.errors.SandboxWorkerError` is dead-lettered with the
reason. A retriable one is tried again (``transient_attempts``), then let
through, as is anything that is not ours (a bug): the loop stops the worker with
it, the record uncommitted. A record its :class:`~sandbox_workers.attempts.Admission`
refuses (it killed ``quarantine_after`` workers) is dead-lettered unjudged.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from kafkaio import (
    DeadLetterWriter,
    ProduceError,
    Producer,
    Record,
    TopicPartition,
    completion_attributes,
    delivered_attributes,
    process_attributes,
    send_attributes,
    send_with_retries,
)
from sandbox_workers.attempts import Admission
from sandbox_workers.errors import SandboxWorkerError
from sandbox_workers.judgement import Judging
from sandbox_workers.metrics import WorkerMetrics
from sandbox_workers.worker_config import WorkerConfig, WorkerStats
from schemas import (
    CONTENT_TYPE,
    DEAD_LETTER_ERROR_TYPES,
    Completion,
    DeadLetterErrorType,
    DeadLetterStage,
    RewardEvent,
    SchemaError,
    Topics,
    Verdict,
    decode,
    encode,
    extract_context,
    inject_context,
    unpack_programs,
)

__all__ = ["RecordJudge", "RewardUndeliverable", "error_type_of", "queue_span"]

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)


class RewardUndeliverable(SandboxWorkerError):
    """A reward could not land: its topic refused it, or retriable errors outlasted the retries.

    Not retriable (the retries are spent): the input goes to the DLQ with the reason,
    so that one unreachable destination (a reply topic whose client is gone, a record
    the topic refuses) does not pin its partition.
    """


class RecordJudge:
    """Judges completion records; everything it needs is handed to it, built and started."""

    def __init__(
        self,
        *,
        topics: Topics,
        config: WorkerConfig,
        admission: Admission,
        judging: Judging,
        producer: Producer,
        dead_letters: DeadLetterWriter,
        stats: WorkerStats,
        metrics: WorkerMetrics,
    ) -> None:
        self._topics = topics
        self._config = config
        self._admission = admission
        self._judging = judging
        self._producer = producer
        self._dead_letters = dead_letters
        self._stats = stats
        self._metrics = metrics

    async def judge(self, tp: TopicPartition, record: Record) -> None:
        """Judge ``record`` (of ``tp``); return once its rewards or dead letter are acknowledged."""
        attrs = {
            **process_attributes(record, self._config.group_id),
            "rewardbus.worker_id": self._config.worker_id,
        }
        produced = extract_context(record.headers)
        queue_span(record, produced)
        with tracer.start_as_current_span(
            "judge completion", context=produced, kind=SpanKind.CONSUMER, attributes=attrs
        ) as span:
            refusal = await self._admission.refusal(tp, record.offset)
            if refusal is not None:
                await self._quarantine(tp, record, refusal, span)
                return
            async with self._admission.judging(tp, record.offset):
                await self._judge(record, span)

    async def _quarantine(
        self, tp: TopicPartition, record: Record, reason: str, span: trace.Span
    ) -> None:
        log.error("%s:%d@%d %s", tp.topic, tp.partition, record.offset, reason)
        await self._dead_letter(record, reason, "Quarantined", "quarantine")
        await self._admission.refused(tp, record.offset)
        span.set_status(Status(StatusCode.ERROR, reason))

    async def _judge(self, record: Record, span: trace.Span) -> None:
        queue_ms = max(0.0, time.time() * 1000 - record.timestamp_ms)
        try:
            completion = decode(record.value, Completion)
        except SchemaError as exc:
            await self._dead_letter(record, exc.reason, "SchemaError", "decode")
            span.set_status(Status(StatusCode.ERROR, exc.reason))
            return
        span.set_attributes(completion_attributes(completion))
        self._metrics.received(completion, queue_ms)
        refused = self._refused(completion)
        if refused is not None:
            reason, error_type = refused
            await self._dead_letter(record, reason, error_type, "validate")
            span.set_status(Status(StatusCode.ERROR, reason))
            return
        programs = unpack_programs(completion)
        span.set_attribute("rewardbus.programs", len(programs))
        await asyncio.gather(
            *(self._judge_program(record, index, one, queue_ms) for index, one in programs)
        )

    def _refused(self, completion: Completion) -> tuple[str, DeadLetterErrorType] | None:
        """Why a decoded completion is not judged at all (and the letter's error type), or None."""
        reply = completion.reply_topic
        if reply is not None and not self._topics.is_reply_topic(reply):
            # A completion names its reward's destination: never let it write elsewhere.
            reason = (
                f"reply_topic {reply!r} is not a reply topic of this deployment "
                f"(it must start with {self._topics.replies_prefix!r})"
            )
            return reason, "InvalidReplyTopic"
        oversized = _oversized(completion, self._config.max_program_chars)
        if oversized is not None:
            return oversized, "CompletionTooLarge"
        return None

    async def _judge_program(
        self, record: Record, index: int, completion: Completion, queue_ms: float
    ) -> None:
        event = await self._execute(record, completion)
        if event is None:
            return
        event = msgspec.structs.replace(
            event,
            queue_ms=round(queue_ms, 3),
            worker_id=self._config.worker_id,
            program_index=index,
        )
        span = trace.get_current_span()
        span.set_attribute("rewardbus.verdict", str(event.verdict))
        span.set_attribute("rewardbus.score", event.score)
        if event.verdict == Verdict.SANDBOX_ERROR:  # the judge's fault, not the program's
            span.set_status(Status(StatusCode.ERROR, f"sandbox_error: {event.message[:200]}"))
        topic = completion.reply_topic or self._topics.rewards
        try:
            await self._emit_reward(event, topic)
        except RewardUndeliverable as exc:
            # The reward cannot land (a reply topic whose client is gone, a record the
            # topic refuses): the input goes to the DLQ with why, and its partition moves on.
            await self._dead_letter(record, exc.reason, error_type_of(exc), "emit")
        else:
            self._metrics.reward(event, completion, record.timestamp_ms, time.time() * 1000)

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
            await self._dead_letter(record, exc.reason, error_type_of(exc), "execute")
            return None
        if hit:
            self._stats.cache_hits += 1
        trace.get_current_span().set_attribute("rewardbus.cache_hit", hit)
        return event

    async def _judge_with_retries(self, completion: Completion) -> tuple[RewardEvent, bool]:
        """A retriable fault (the problems table behind) is tried again, a bounded number
        of times, before it is let through (to stop the worker: see the module doc)."""
        attempts = max(self._config.transient_attempts, 1)
        for attempt in range(1, attempts + 1):
            try:
                return await self._judging.judge(completion)
            except SandboxWorkerError as exc:
                if not exc.retriable or attempt == attempts:
                    raise
                log.warning("%s (attempt %d); trying again", exc.reason, attempt)
                await asyncio.sleep(self._config.produce_retry_backoff_s * attempt)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _emit_reward(self, event: RewardEvent, topic: str) -> None:
        attributes: dict[str, str | int | float] = {
            **send_attributes(topic, key=event.batch_id),
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
                    self._producer,
                    topic,
                    encode(event),
                    key=event.batch_id.encode(),
                    headers=headers,
                    attempts=self._config.produce_attempts,
                    backoff_s=self._config.produce_retry_backoff_s,
                )
            except ProduceError as exc:
                raise RewardUndeliverable(exc.reason) from exc
            span.set_attributes(delivered_attributes(delivery))
        self._stats.rewarded += 1
        self._stats.verdicts[str(event.verdict)] += 1

    async def _dead_letter(
        self,
        record: Record,
        reason: str,
        error_type: DeadLetterErrorType,
        stage: DeadLetterStage,
    ) -> None:
        # The input's offset waits on this record, and there is nowhere further to send
        # it: retriable errors are retried for ever; any other stops the worker.
        await self._dead_letters.write(
            record,
            reason=reason,
            error_type=error_type,
            stage=stage,
            backoff_s=self._config.produce_retry_backoff_s,
        )
        self._stats.dead_lettered += 1
        self._metrics.dead_letter(stage, error_type)
        span = trace.get_current_span()  # the record's "judge completion" span
        span.set_attribute("rewardbus.dead_letter.stage", stage)
        span.set_status(
            Status(StatusCode.ERROR, f"dead-lettered ({stage}, {error_type}): {reason}")
        )


_ERROR_TYPES: dict[str, DeadLetterErrorType] = {name: name for name in DEAD_LETTER_ERROR_TYPES}


def error_type_of(exc: SandboxWorkerError) -> DeadLetterErrorType:
    """The dead letter's ``error_type`` for ``exc``: its class's name, as listed in
    :data:`~schemas.DeadLetterErrorType` (a class not listed there: its nearest listed base)."""
    for cls in type(exc).__mro__:
        listed = _ERROR_TYPES.get(cls.__name__)
        if listed is not None:
            return listed
    return "SandboxWorkerError"  # unreachable: every exc is one


def _oversized(completion: Completion, limit: int) -> str | None:
    """Why ``completion``'s program text is too long to judge, or None."""
    texts = {"response": completion.response or "", "code": completion.code or ""}
    texts |= {f"programs[{i}]": program for i, program in enumerate(completion.programs)}
    for name, text in texts.items():
        if len(text) > limit:
            return f"{name} is {len(text):,} characters; workers judge at most {limit:,}"
    return None


def queue_span(record: Record, produced: Context) -> None:
    """The time the record waited (its produce timestamp until judging starts), as a span.

    A sibling of "judge completion" (or "tool call") under the producer's span, not
    its child: it ends where judging begins, and a child may not start before its parent.
    """
    end = time.time_ns()
    start = min(end, record.timestamp_ms * 1_000_000)
    span = tracer.start_span(
        "queue wait",
        context=produced,
        start_time=start,
        attributes={
            "rewardbus.queue_ms": round((end - start) / 1e6, 3),
            **delivered_attributes(record),
        },
    )
    span.end(end_time=end)
