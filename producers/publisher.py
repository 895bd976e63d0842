"""The trainer-side publisher: completions, batch manifests, shared test suites and tool calls.

It is the one publisher of completions and problems: the learner-side reward
client (``consumers.reward_client``, for verl and the judge canaries) publishes
through it too, so every completion gets the same partitioning, headers and span.

A record the broker does not take is :class:`~producers.errors.PublishError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from kafkaio import (
    AioClients,
    Clients,
    Delivery,
    KafkaIOError,
    Lifecycle,
    Producer,
    ProducerOptions,
    completion_attributes,
    delivered_attributes,
    send_attributes,
)
from producers.errors import PublishError
from schemas import (
    CONTENT_TYPE,
    MAX_RECORD_BYTES,
    BatchManifest,
    Completion,
    KafkaSettings,
    ProblemRecord,
    ToolCall,
    encode,
    inject_context,
    is_canary_batch,
)

__all__ = ["ProducerConfig", "RolloutProducer"]

tracer = trace.get_tracer(__name__)


@dataclass(frozen=True)
class ProducerConfig:
    """Producer tuning. Idempotence and ``acks=all`` are not optional."""

    compression: str | None = "lz4"
    linger_ms: int = 1
    max_batch_bytes: int = 1 << 20
    request_timeout_ms: int = 30_000
    # Large enough for CodeContests-sized suites; the topic's max.message.bytes must
    # allow it too (``rewardbus topics`` sets 16 MiB on completions and problems).
    max_request_size: int = MAX_RECORD_BYTES
    # Identical completions (same language, problem and program text) seen within the
    # last this-many distinct ones go to the partition of their first copy, so one
    # worker judges them once (in-flight coalescing, then its local result cache)
    # instead of two workers racing. 0 turns the affinity off.
    affinity_entries: int = 65_536


class RolloutProducer(Lifecycle):
    """Publishes completions (key ``sample_id``), manifests (key ``batch_id``), problems
    and tool calls (key ``session_id``).

    Each completion starts the sample's trace (or joins the caller's current span):
    the ``publish completion`` span's context travels in the record headers to the
    sandbox worker and the aggregator. ``clients`` makes the Kafka clients (default:
    :class:`~kafkaio.AioClients` for ``kafka``).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        config: ProducerConfig | None = None,
        *,
        clients: Clients | None = None,
    ) -> None:
        self._kafka = kafka
        self._clients = clients or AioClients(kafka)
        self._config = config or ProducerConfig()
        self._producer: Producer | None = None
        self._partitions: list[int] = []
        self._turn = 0
        self._affinity: OrderedDict[bytes, int] = OrderedDict()

    async def start(self) -> None:
        """Connect to the cluster."""
        cfg = self._config
        producer = self._clients.producer(
            ProducerOptions(
                acks="all",
                idempotent=True,
                compression=cfg.compression,
                linger_ms=cfg.linger_ms,
                max_batch_bytes=cfg.max_batch_bytes,
                request_timeout_ms=cfg.request_timeout_ms,
                max_request_bytes=cfg.max_request_size,
            )
        )
        with _published():
            await producer.start()
        self._producer = producer

    async def _next_partition(self, topic: str, completion: Completion) -> int:
        """Round-robin over the completions topic's partitions, duplicates with their first copy.

        Completions keep ``sample_id`` as their key (it names the record in the DLQ
        and in tools), but hashing unique keys splits a batch unevenly: with two
        workers a 328-sample batch lands about 175/153, and the batch waits on the
        busier worker. Round-robin gives each partition, so each worker, an equal
        share of the distinct programs; a repeat of a recent program follows its
        first copy (``ProducerConfig.affinity_entries``). Placement is only a hint:
        any worker judges any completion correctly.
        """
        if not self._partitions:
            with _published():
                self._partitions = sorted(await self._client.partitions_for(topic))
        limit = self._config.affinity_entries
        content = _content_key(completion) if limit > 0 else b""
        if content in self._affinity:
            self._affinity.move_to_end(content)
            return self._affinity[content]
        self._turn += 1
        partition = self._partitions[self._turn % len(self._partitions)]
        if limit > 0:
            self._affinity[content] = partition
            if len(self._affinity) > limit:
                self._affinity.popitem(last=False)
        return partition

    async def stop(self) -> None:
        """Flush what is pending and disconnect."""
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()

    @property
    def _client(self) -> Producer:
        if self._producer is None:
            raise RuntimeError("RolloutProducer is not started")
        return self._producer

    async def publish(self, completion: Completion) -> None:
        """Publish one completion and wait until the broker has it."""
        with _published():
            await (await self._send_completion(completion))

    async def publish_many(self, completions: Iterable[Completion]) -> int:
        """Publish completions pipelined (not one round trip each); wait for every ack."""
        with _published():
            pending = [await self._send_completion(c) for c in completions]
            await asyncio.gather(*pending)
        return len(pending)

    async def publish_manifest(self, manifest: BatchManifest) -> None:
        """Publish the manifest that tells the aggregator what a batch holds."""
        _refuse_canary_space(manifest.batch_id)
        topic = self._kafka.topics.manifests
        with tracer.start_as_current_span(
            "publish manifest", kind=SpanKind.PRODUCER, attributes=send_attributes(topic)
        ) as span:
            span.set_attribute("rewardbus.batch_id", manifest.batch_id)
            span.set_attribute("rewardbus.batch_size", len(manifest.sample_ids))
            with _published():
                await self._client.send_and_wait(
                    topic,
                    encode(manifest),
                    key=manifest.batch_id.encode(),
                    headers=inject_context([CONTENT_TYPE]),
                )

    async def publish_problem(self, problem: ProblemRecord) -> None:
        """Publish a shared test suite to the compacted problems topic."""
        with _published():
            await self._client.send_and_wait(
                self._kafka.topics.problems,
                encode(problem),
                key=problem.problem_id.encode(),
                headers=[CONTENT_TYPE],
            )

    async def publish_tool_call(self, call: ToolCall) -> None:
        """Publish one tool call (key ``session_id``: a session's calls reach one worker,
        in order) and wait until the broker has it.

        The ``publish tool call`` span joins the caller's current span (a trajectory's)
        and is the parent of the worker's ``tool call`` span.
        """
        topic = self._kafka.topics.tool_calls
        attributes = {
            **send_attributes(topic, key=call.session_id),
            "rewardbus.session_id": call.session_id,
            "rewardbus.seq": call.seq,
            "rewardbus.language": call.language,
        }
        with tracer.start_as_current_span(
            "publish tool call", kind=SpanKind.PRODUCER, attributes=attributes
        ) as span:
            with _published():
                delivery = await self._client.send_and_wait(
                    topic,
                    encode(call),
                    key=call.session_id.encode(),
                    headers=inject_context([CONTENT_TYPE]),
                )
            span.set_attributes(delivered_attributes(delivery))

    async def _send_completion(self, completion: Completion) -> asyncio.Future[Delivery]:
        if completion.reply_topic is None:  # its reward goes to the aggregator
            _refuse_canary_space(completion.batch_id)
        topic = self._kafka.topics.completions
        partition = await self._next_partition(topic, completion)
        attributes = {
            **send_attributes(topic, partition=partition, key=completion.sample_id),
            **completion_attributes(completion),
        }
        # The span lasts until the broker's ack (and then names the offset); the
        # context it injects is the parent of everything the sample goes through.
        span = tracer.start_span(
            "publish completion", kind=SpanKind.PRODUCER, attributes=attributes
        )
        try:
            with trace.use_span(span, end_on_exit=False):
                headers = inject_context([CONTENT_TYPE])
            delivery = await self._client.send(
                topic,
                encode(completion),
                key=completion.sample_id.encode(),
                partition=partition,
                headers=headers,
            )
        except BaseException as exc:
            _end_publish(span, error=exc)
            raise
        delivery.add_done_callback(lambda done: _end_publish(span, delivery=done))
        return delivery


def _refuse_canary_space(batch_id: str) -> None:
    """The aggregator ignores canary batch ids: a learner batch named so would never come.

    A completion with a ``reply_topic`` (a canary, a verl sample) is exempt: its
    reward goes to that topic, never to the aggregator.
    """
    if is_canary_batch(batch_id):
        raise ValueError(f"batch id {batch_id!r} is in the judge-canary space; rename the batch")


@contextlib.contextmanager
def _published() -> Iterator[None]:
    """The seam's broker errors, as this package's own."""
    try:
        yield
    except KafkaIOError as exc:
        raise PublishError(exc.reason, retriable=exc.retriable) from exc


def _content_key(completion: Completion) -> bytes:
    """What makes two completions the same judging work, as a short digest."""
    digest = hashlib.blake2b(digest_size=16)
    parts = (
        completion.language,
        completion.problem_id or "",
        completion.tests_digest or "",
        completion.code or "",
        completion.response or "",
        *completion.programs,
    )
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.digest()


def _end_publish(
    span: trace.Span,
    *,
    delivery: asyncio.Future[Delivery] | None = None,
    error: BaseException | None = None,
) -> None:
    if delivery is not None and not delivery.cancelled():
        error = delivery.exception()
        if error is None:
            span.set_attributes(delivered_attributes(delivery.result()))
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
    span.end()
