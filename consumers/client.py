"""The learner-side client: read scored batches, each batch once.

Emission is at-least-once (an aggregator that crashes between producing a batch
and recording it as emitted produces it again), so the client deduplicates by
batch_id. Undecodable records are logged and skipped: the learner is not the
place to repair the topic. A scored topic that does not exist within 30 s is
:class:`~kafkaio.TopicNotFound`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from consumers.errors import ConsumerError
from consumers.position import StreamPosition
from kafkaio import (
    AioClients,
    Clients,
    CommitFailed,
    Consumer,
    ConsumerOptions,
    Lifecycle,
    Record,
    TopicPartition,
    assign_at,
    assign_from,
    topic_partitions,
)
from schemas import KafkaSettings, SchemaError, ScoredBatch, decode

__all__ = ["ScoredBatchBufferFullError", "ScoredBatches"]

log = logging.getLogger(__name__)

_POLL_MS = 200
_TOPIC_WAIT_S = 30.0
# A position keeps this many of the latest batch ids taken, whatever their offsets, so
# that a copy an aggregator re-emits after a restart is not taken again after a resume.
_RECENT_TAKEN = 1024


class ScoredBatchBufferFullError(ConsumerError):
    """``get`` had to hold more other batches than ``max_buffered`` while it waited.

    Not retriable as is: consume the other batches (iterate, or ``get`` them) or
    raise ``max_buffered``.
    """


class ScoredBatches(Lifecycle):
    """Scored batches from the scored topic, deduplicated by batch_id.

    Without ``group_id`` the client reads every partition on its own (from the
    beginning when ``from_beginning``, else from the end). With ``group_id`` it joins
    that consumer group and commits, per partition, up to the oldest batch it has
    not handed out yet, so a restarted learner gets again only what it had not had.
    Without a group, ``start_at`` (a :meth:`position` saved earlier, e.g. in a
    checkpoint) starts each partition where that position says instead.
    Batches read while ``get`` waits for another one are buffered, at most
    ``max_buffered`` of them; batch ids handed out are remembered, at most
    ``max_remembered`` of them (oldest forgotten first). ``clients`` makes the
    Kafka clients (default: :class:`~kafkaio.AioClients` for ``kafka``).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        group_id: str | None = None,
        from_beginning: bool = True,
        start_at: StreamPosition | None = None,
        max_buffered: int = 1024,
        max_remembered: int = 100_000,
        clients: Clients | None = None,
    ) -> None:
        if start_at is not None:
            if group_id is not None:
                raise ValueError("start_at is for a reader without a group (the group commits)")
            if start_at.topic != kafka.topics.scored:
                raise ValueError(
                    f"the position is in {start_at.topic!r}, not {kafka.topics.scored!r}"
                )
        self._kafka = kafka
        self._start_at = start_at
        self._clients = clients or AioClients(kafka)
        self._group_id = group_id
        self._from_beginning = from_beginning
        self._max_buffered = max_buffered
        self._max_remembered = max_remembered
        self._consumer: Consumer | None = None
        # batch_id -> (partition, offset, batch), in arrival order.
        self._buffer: dict[str, tuple[TopicPartition, int, ScoredBatch]] = {}
        # batch_id -> where it was read; None for an id taken before a restart and not
        # read again yet.
        self._handed: dict[str, tuple[TopicPartition, int] | None] = dict.fromkeys(
            start_at.taken if start_at is not None else ()
        )
        self._consumed_to: dict[TopicPartition, int] = {}
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Connect and position the consumer."""
        topic = self._kafka.topics.scored
        # A subscription to a topic that does not exist yet would only notice it at
        # the next metadata refresh (minutes): wait for it here instead.
        partitions = await topic_partitions(
            self._clients, topic, timeout_s=_TOPIC_WAIT_S, poll_s=_POLL_MS / 1000
        )
        consumer = self._clients.consumer(
            ConsumerOptions(group_id=self._group_id, from_beginning=self._from_beginning)
        )
        await consumer.start()
        if self._group_id is not None:
            consumer.subscribe([topic])
        elif self._start_at is not None:
            await assign_at(consumer, partitions, self._start_at.offsets)
        else:
            await assign_from(consumer, partitions, from_beginning=self._from_beginning)
        if self._group_id is None:
            for tp in partitions:
                self._consumed_to[tp] = await consumer.position(tp)
        self._consumer = consumer

    def position(self) -> StreamPosition:
        """Where this reader is: save it with the state built from what it handed out.

        A reader started with ``start_at=`` that position hands out exactly the
        batches this one has not handed out yet (see :mod:`consumers.position`).
        """
        low = self._low_water()
        recent = set(list(self._handed)[-_RECENT_TAKEN:])
        taken = tuple(
            batch_id
            for batch_id, where in self._handed.items()
            if batch_id in recent or (where is not None and where[1] >= low.get(where[0], 0))
        )
        offsets = {tp.partition: offset for tp, offset in low.items()}
        return StreamPosition(topic=self._kafka.topics.scored, offsets=offsets, taken=taken)

    def _low_water(self) -> dict[TopicPartition, int]:
        """Per partition, the oldest offset whose batch has not been handed out."""
        low = dict(self._consumed_to)
        for tp, offset, _batch in self._buffer.values():
            low[tp] = min(low.get(tp, offset), offset)
        return low

    async def stop(self) -> None:
        """Close the consumer (leaving the group, if any)."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()

    # The timeout is part of the public API (callers wait for one batch at a time).
    async def get(self, batch_id: str, timeout: float | None = None) -> ScoredBatch:  # noqa: ASYNC109
        """Wait for batch ``batch_id`` (buffering the others read meanwhile).

        Raises ``TimeoutError`` after ``timeout`` seconds, and
        :class:`ScoredBatchBufferFullError` if too many other batches pile up.
        A batch already handed out is not handed out again: it would wait forever.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        async with self._lock:
            while batch_id not in self._buffer:
                if len(self._buffer) >= self._max_buffered:
                    raise ScoredBatchBufferFullError(
                        f"{len(self._buffer)} other batches buffered while waiting for {batch_id}"
                    )
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"scored batch {batch_id} did not arrive in {timeout} s")
                await self._fetch(remaining)
            return await self._hand_out(batch_id)

    # The timeout is part of the public API, as for get().
    async def next(self, timeout: float | None = None) -> ScoredBatch:  # noqa: ASYNC109
        """The next batch in arrival order (buffered ones first), each batch once.

        Raises ``TimeoutError`` when none arrives within ``timeout`` seconds; unlike
        cancelling an ``async for``, that leaves the client usable.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        async with self._lock:
            while not self._buffer:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"no scored batch arrived in {timeout} s")
                await self._fetch(remaining)
            return await self._hand_out(next(iter(self._buffer)))

    def __aiter__(self) -> AsyncIterator[ScoredBatch]:
        """Every batch once, in arrival order (buffered ones first), until stopped."""
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ScoredBatch]:
        while True:
            yield await self.next()

    async def _fetch(self, remaining: float | None) -> None:
        consumer = self._running()
        wait_ms = _POLL_MS if remaining is None else max(1, min(_POLL_MS, int(remaining * 1000)))
        fetched = await consumer.getmany(timeout_ms=wait_ms)
        for tp, records in fetched.items():
            for record in records:
                self._accept(tp, record)
            self._consumed_to[tp] = records[-1].offset + 1

    def _accept(self, tp: TopicPartition, record: Record) -> None:
        try:
            batch = decode(record.value, ScoredBatch)
        except SchemaError as exc:
            log.error(  # noqa: TRY400 - the reason says it all; a traceback would not help
                "%s[%d]@%d skipped: %s", tp.topic, tp.partition, record.offset, exc.reason
            )
            return
        if batch.batch_id in self._handed:
            if self._handed[batch.batch_id] is None:
                self._handed[batch.batch_id] = (tp, record.offset)
            return  # taken before this reader's restart, or a re-emitted copy
        if batch.batch_id in self._buffer:
            return  # re-emitted after an aggregator restart: the first copy counts
        self._buffer[batch.batch_id] = (tp, record.offset, batch)

    async def _hand_out(self, batch_id: str) -> ScoredBatch:
        tp, offset, batch = self._buffer.pop(batch_id)
        self._handed[batch_id] = (tp, offset)
        while len(self._handed) > self._max_remembered:
            del self._handed[next(iter(self._handed))]
        if self._group_id is not None:
            await self._commit()
        return batch

    async def _commit(self) -> None:
        """Commit each partition up to its oldest batch not yet handed out."""
        committable = self._low_water()
        owned = self._running().assignment()
        committable = {tp: offset for tp, offset in committable.items() if tp in owned}
        if not committable:
            return
        try:
            await self._running().commit(committable)
        except CommitFailed as exc:
            # The group rebalanced; the next owner re-reads from the last commit.
            log.warning("scored-batch offset commit skipped: %s", exc.reason)

    def _running(self) -> Consumer:
        if self._consumer is None:
            raise RuntimeError("ScoredBatches is not started (use start() or async with)")
        return self._consumer
