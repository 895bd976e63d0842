"""The learner-side stream aggregator service (the kafkaio seam, a compacted state topic).

One iteration: poll manifests and rewards → decode (undecodable → DLQ, acked) →
feed the partition's :class:`BatchAssembler` → emit due batches to the scored topic
and wait for the acks. At most every ``flush_interval_s`` (and before partitions are
revoked, and on shutdown) a flush persists the state changes, waits for the acks,
then commits the input offsets. So state is durable before offsets move, and a
batch is marked emitted only after the broker has it: a crash anywhere redelivers
input (deduplicated by sample_id) or re-emits a batch (deduplicated by the learner
by batch_id), and never loses either.

Why not faust: see benchmarks/faust_repro/README.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable

from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from consumers.aggregator_metrics import AggregatorMetrics
from consumers.assembler import BatchAssembler, InvalidMessageError, ReadyBatch, StateChange
from consumers.config import AggregatorConfig
from consumers.state_store import StateStore, prepare_topics
from consumers.tracing import link_to, traceparent_of
from kafkaio import (
    AioClients,
    Clients,
    CommitFailed,
    Consumer,
    ConsumerOptions,
    DeadLetterWriter,
    Delivery,
    Producer,
    ProducerOptions,
    Rebalance,
    Record,
    TopicPartition,
    delivered_attributes,
    partition_lags,
    process_attributes,
    running,
    send_attributes,
)
from schemas import (
    CONTENT_TYPE,
    BatchManifest,
    DeadLetterErrorType,
    DeadLetterStage,
    KafkaSettings,
    RewardEvent,
    SchemaError,
    decode,
    encode,
    extract_context,
    inject_context,
)

__all__ = ["run_aggregator"]

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)


async def run_aggregator(
    kafka: KafkaSettings,
    config: AggregatorConfig,
    *,
    shutdown: Awaitable[None],
    ready: asyncio.Event | None = None,
    clients: Clients | None = None,
) -> None:
    """Run the aggregator until ``shutdown`` resolves, then commit and leave the group.

    ``ready`` is set once the instance has joined its group and restored the state
    of its partitions. The manifests and rewards topics must exist (with equal
    partition counts); the state topic is created if missing. Cancelling the task
    stops at once without a final commit, as a crash would: the next instance
    resumes from the persisted state and the committed offsets. ``clients`` makes the
    Kafka clients (default: :class:`~kafkaio.AioClients` for ``kafka``).
    """
    clients = clients or AioClients(kafka)
    await prepare_topics(kafka, wait_s=config.topic_wait_s, clients=clients)
    producer = clients.producer(ProducerOptions(acks="all", idempotent=True, linger_ms=2))
    consumer = clients.consumer(
        ConsumerOptions(
            group_id=config.group_id,
            group_instance_id=config.group_instance_id,
            # Range keeps partition p of manifests and of rewards on the same member;
            # the default round-robin assignor does not.
            assignor="range",
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_records=config.max_poll_records,
            fetch_max_wait_ms=config.fetch_max_wait_ms,
            fetch_min_bytes=config.fetch_min_bytes,
        )
    )
    service = _Aggregator(kafka, config, consumer, producer, clients)
    listener = Rebalance(service.revoked, service.assigned)
    consumer.subscribe([kafka.topics.manifests, kafka.topics.rewards], listener=listener)
    # Stopped in reverse: the consumer first, which leaves the group, so partitions move at once.
    async with running(producer, consumer):
        await service.run(shutdown, ready)


class _Metrics:
    def __init__(self) -> None:
        meter = metrics.get_meter(__name__)
        self.rewards = meter.create_counter(
            "rewardbus.aggregator.rewards", description="rewards consumed, by outcome"
        )
        self.manifests = meter.create_counter(
            "rewardbus.aggregator.manifests", description="manifests consumed, by outcome"
        )
        self.batches = meter.create_counter(
            "rewardbus.aggregator.batches", description="scored batches emitted, by completeness"
        )
        self.dead_letters = meter.create_counter(
            "rewardbus.aggregator.dead_letters", description="records sent to the DLQ"
        )
        self.expired = meter.create_counter(
            "rewardbus.aggregator.expired_batches",
            description="manifest-less batches dropped after the pending TTL",
        )
        # Rare events start at 0: a series first seen at 1 is an increase no rate() sees.
        for complete in (True, False):
            self.batches.add(0, {"complete": complete})
        for stage in ("decode", "validate"):
            self.dead_letters.add(0, {"stage": stage})
        self.expired.add(0)


class _Aggregator:
    def __init__(
        self,
        kafka: KafkaSettings,
        config: AggregatorConfig,
        consumer: Consumer,
        producer: Producer,
        clients: Clients,
    ) -> None:
        self._topics = kafka.topics
        self._config = config
        self._consumer = consumer
        self._producer = producer
        self._letters = DeadLetterWriter(producer, kafka.topics.dlq, service=config.service_name)
        self._state = StateStore(kafka, producer, clients)
        self._assemblers: dict[int, BatchAssembler] = {}
        # Held by each iteration and by the rebalance callbacks: a rebalance waits
        # for the iteration in progress to persist and commit.
        self._lock = asyncio.Lock()
        self._joined = asyncio.Event()
        self._metrics = _Metrics()
        self._gauges = AggregatorMetrics(config.service_name)
        self._last_gauges = 0.0
        # Input offsets processed but not yet committed; committed by _flush only.
        self._unflushed: dict[TopicPartition, int] = {}
        self._last_flush = time.monotonic()

    # -- lifecycle -------------------------------------------------------------------

    async def run(self, shutdown: Awaitable[None], ready: asyncio.Event | None) -> None:
        stop = asyncio.ensure_future(shutdown)
        self._gauges.register()  # its gauges live as long as this loop
        try:
            while not stop.done():
                fetched = await self._consumer.getmany(
                    timeout_ms=int(self._config.deadline_check_interval_s * 1000),
                    max_records=self._config.max_poll_records,
                )
                async with self._lock:
                    await self._process(fetched)
                    if time.monotonic() - self._last_flush >= self._config.flush_interval_s:
                        await self._flush()
                if ready is not None and self._joined.is_set():
                    ready.set()
                await self._sample_gauges_if_due()
            # A clean stop flushes; a cancelled task (a crash) does not get here.
            async with self._lock:
                await self._flush()
        finally:
            self._gauges.unregister()
            if stop is not shutdown:  # our own wrapper, not the caller's future
                stop.cancel()
        self._log_summary()

    async def _sample_gauges_if_due(self) -> None:
        """Lag and open batches, at most once per ``gauge_interval_s`` (scrapes read them)."""
        if time.monotonic() - self._last_gauges < self._config.gauge_interval_s:
            return
        self._last_gauges = time.monotonic()
        self._gauges.open_batches = sum(a.open_batches for a in self._assemblers.values())
        self._gauges.lags = await partition_lags(self._consumer)

    async def revoked(self, revoked: frozenset[TopicPartition]) -> None:
        # Iterations run under the lock, so once we hold it none is half done; the
        # flush makes everything processed durable and committed before the
        # partitions move. State stays in memory: if the partition comes back
        # unchanged, it needs no restore.
        async with self._lock:
            log.info("revoked %s", sorted(f"{tp.topic}:{tp.partition}" for tp in revoked))
            await self._flush()

    async def assigned(self, assigned: frozenset[TopicPartition]) -> None:
        async with self._lock:
            wanted = {tp.partition for tp in assigned}
            gone = set(self._assemblers) - wanted
            for partition in gone:
                del self._assemblers[partition]
            self._state.forget(gone)
            current = await self._state.unchanged(set(self._assemblers))
            stale = wanted - current
            for partition in set(self._assemblers) - current:
                del self._assemblers[partition]
            restored = await self._state.restore(stale, self._config.restore_timeout_s)
            for partition in stale:
                assembler = BatchAssembler(self._config.limits())
                assembler.restore(restored.get(partition, []))
                self._assemblers[partition] = assembler
            log.info(
                "assigned partitions %s (restored %s, kept %s); %d open batches",
                sorted(wanted),
                sorted(stale),
                sorted(current),
                sum(a.open_batches for a in self._assemblers.values()),
            )
            self._joined.set()

    # -- one iteration -----------------------------------------------------------------

    async def _process(self, fetched: dict[TopicPartition, list[Record]]) -> None:
        now = time.time()
        offsets: dict[TopicPartition, int] = {}
        letters: list[asyncio.Future[Delivery]] = []
        for tp, records in fetched.items():
            assembler = self._assemblers.get(tp.partition)
            if assembler is None:
                continue  # revoked since the fetch: the new owner reads these again
            for record in records:
                letter = await self._handle(record, assembler, now)
                if letter is not None:
                    letters.append(letter)
            offsets[tp] = records[-1].offset + 1
        await self._emit_due(now)
        await asyncio.gather(*letters)
        self._unflushed.update(offsets)

    async def _flush(self) -> None:
        """Persist the state changes (acked), then commit the offsets they cover."""
        self._last_flush = time.monotonic()
        await self._state.persist(self._drain_changes())
        offsets, self._unflushed = self._unflushed, {}
        await self._commit(offsets)

    async def _handle(
        self, record: Record, assembler: BatchAssembler, now: float
    ) -> asyncio.Future[Delivery] | None:
        attributes = process_attributes(record, self._config.group_id)
        is_manifest = record.topic == self._topics.manifests
        with tracer.start_as_current_span(
            "aggregate manifest" if is_manifest else "aggregate",
            context=extract_context(record.headers),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
        ) as span:
            try:
                if is_manifest:
                    self._add_manifest(record, assembler, now, span)
                else:
                    self._add_reward(record, assembler, now, span)
            except SchemaError as exc:
                span.set_status(Status(StatusCode.ERROR, exc.reason))
                return await self._dead_letter(record, exc.reason, "SchemaError", "decode")
            except InvalidMessageError as exc:
                span.set_status(Status(StatusCode.ERROR, exc.reason))
                return await self._dead_letter(
                    record, exc.reason, "InvalidMessageError", "validate"
                )
        return None

    def _add_reward(
        self, record: Record, assembler: BatchAssembler, now: float, span: trace.Span
    ) -> None:
        reward = decode(record.value, RewardEvent)
        span.set_attributes(
            {
                "rewardbus.sample_id": reward.sample_id,
                "rewardbus.batch_id": reward.batch_id,
                "rewardbus.verdict": str(reward.verdict),
                "rewardbus.score": reward.score,
                "rewardbus.cache_hit": reward.cache_hit,
                "rewardbus.worker_id": reward.worker_id,
                "rewardbus.policy_version": reward.policy_version,
            }
        )
        outcome = assembler.add_reward(reward, now, traceparent_of(span))
        span.set_attribute("rewardbus.outcome", outcome.value)
        self._metrics.rewards.add(1, {"outcome": outcome.value})

    def _add_manifest(
        self, record: Record, assembler: BatchAssembler, now: float, span: trace.Span
    ) -> None:
        manifest = decode(record.value, BatchManifest)
        span.set_attribute("rewardbus.batch_id", manifest.batch_id)
        outcome = assembler.add_manifest(manifest, now)
        span.set_attribute("rewardbus.outcome", outcome.value)
        self._metrics.manifests.add(1, {"outcome": outcome.value})

    async def _dead_letter(
        self,
        record: Record,
        reason: str,
        error_type: DeadLetterErrorType,
        stage: DeadLetterStage,
    ) -> asyncio.Future[Delivery]:
        self._metrics.dead_letters.add(1, {"stage": stage})
        # Not awaited here: the iteration gathers its letters' acks before it moves on.
        return await self._letters.send(record, reason=reason, error_type=error_type, stage=stage)

    async def _emit_due(self, now: float) -> None:
        for assembler in self._assemblers.values():
            expired = assembler.expire(now)
            if expired:
                self._metrics.expired.add(len(expired))
            for ready in assembler.due(now):
                await self._emit(ready)

    async def _emit(self, ready: ReadyBatch) -> None:
        batch = ready.batch
        links = [link for tp in ready.links if (link := link_to(tp)) is not None]
        with tracer.start_as_current_span(
            "emit scored batch",
            kind=SpanKind.PRODUCER,
            links=links,
            attributes={
                **send_attributes(self._topics.scored, key=batch.batch_id),
                "rewardbus.batch_id": batch.batch_id,
                "rewardbus.batch.size": len(batch.samples),
                "rewardbus.batch.missing": len(batch.missing),
                "rewardbus.batch.masked": len(batch.masked),
                "rewardbus.batch.complete": batch.complete,
                "rewardbus.policy_version": batch.policy_version,
            },
        ) as span:
            if not batch.complete:  # emitted at its deadline: some samples never came
                missing = f"{len(batch.missing)} of {len(batch.samples)} samples missing"
                span.set_status(Status(StatusCode.ERROR, missing))
            # Waits for the ack: only then may the state record the batch as emitted.
            delivery = await self._producer.send_and_wait(
                self._topics.scored,
                encode(batch),
                key=batch.batch_id.encode(),
                headers=inject_context([CONTENT_TYPE]),
            )
            span.set_attributes(delivered_attributes(delivery))
        self._metrics.batches.add(1, {"complete": batch.complete})
        self._gauges.scored(batch)
        log.info(
            "emitted batch %s: %d samples, %d missing, %d masked, %d duplicates ignored",
            batch.batch_id,
            len(batch.samples),
            len(batch.missing),
            len(batch.masked),
            batch.duplicates_ignored,
        )

    def _drain_changes(self) -> dict[int, list[StateChange]]:
        changes = {p: a.drain_changes() for p, a in self._assemblers.items()}
        return {p: c for p, c in changes.items() if c}

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        owned = self._consumer.assignment()
        offsets = {tp: offset for tp, offset in offsets.items() if tp in owned}
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except CommitFailed as exc:
            # The group moved on; state is persisted, so the redelivery that follows
            # is absorbed by the sample_id dedup.
            log.warning("offset commit skipped after a rebalance: %s", exc.reason)

    def _log_summary(self) -> None:
        for partition, assembler in sorted(self._assemblers.items()):
            log.info(
                "partition %d: %d open batches (%d pending), counters %s",
                partition,
                assembler.open_batches,
                assembler.pending_batches,
                assembler.counters,
            )
