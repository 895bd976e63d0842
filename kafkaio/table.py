"""The compacted-table reader: a compacted topic replayed into memory, then followed."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kafkaio.errors import KafkaIOError
from kafkaio.lifecycle import Lifecycle
from kafkaio.options import ConsumerOptions
from kafkaio.protocols import Clients, Consumer
from kafkaio.records import Record, TopicPartition

__all__ = ["CompactedTopicReader", "RecordHandler"]

log = logging.getLogger(__name__)

RecordHandler = Callable[[bytes | None, bytes | None], None]
"""Called as ``handler(key, value)``; ``value`` is None for a tombstone."""


class CompactedTopicReader(Lifecycle):
    """Replays one compacted topic into memory and keeps following it.

    No consumer group: every instance is assigned all partitions and starts from
    the beginning, so each process holds the whole table; with
    ``replay_records`` it starts that many records (split over the partitions)
    before the end instead, for a table that only keeps its newest entries
    anyway. ``handler(key, value)`` is called for every record, in offset order
    per partition, synchronously after the fetch that returned it, so a position
    seen by :meth:`wait_caught_up` is always fully applied. ``value`` is None for
    a tombstone. The handler must not raise; if it does, the record is logged and
    skipped.
    """

    def __init__(
        self,
        clients: Clients,
        topic: str,
        handler: RecordHandler,
        *,
        metadata_timeout_s: float = 30.0,
        poll_timeout_ms: int = 500,
        max_records: int = 1000,
        replay_records: int | None = None,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
    ) -> None:
        self._clients = clients
        self._options = ConsumerOptions(
            fetch_max_wait_ms=fetch_max_wait_ms, fetch_min_bytes=fetch_min_bytes
        )
        self.topic = topic
        self._handler = handler
        self._metadata_timeout_s = metadata_timeout_s
        self._poll_timeout_ms = poll_timeout_ms
        self._max_records = max_records
        self._replay_records = replay_records
        self._consumer: Consumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._tick = asyncio.Event()
        self.records = 0
        self.handler_errors = 0

    async def start(self) -> None:
        """Connect, take every partition of the topic from the beginning, start following."""
        consumer = self._clients.consumer(self._options)
        # Subscribing without a group assigns every partition (and any added
        # later); with nothing committed, each starts at the earliest offset.
        consumer.subscribe([self.topic])
        await consumer.start()
        try:
            await self._wait_for_assignment(consumer)
            if self._replay_records is not None:
                await self._seek_to_tail(consumer, self._replay_records)
        except BaseException:
            await consumer.stop()
            raise
        self._consumer = consumer
        self._task = asyncio.create_task(self._follow(consumer), name=f"read {self.topic}")

    async def stop(self) -> None:
        """Stop following and disconnect."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def wait_caught_up(self, timeout_s: float) -> None:
        """Return once everything in the topic *now* has been applied.

        Raises TimeoutError after ``timeout_s`` seconds, and RuntimeError if the
        reader is not running.
        """
        consumer, task = self._running()
        async with asyncio.timeout(timeout_s):
            ends = await consumer.end_offsets(list(consumer.assignment()))
            while not await self._reached(consumer, ends):
                tick = asyncio.ensure_future(self._tick.wait())
                try:
                    await asyncio.wait({tick, task}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    tick.cancel()
                self._running()

    def _running(self) -> tuple[Consumer, asyncio.Task[None]]:
        if self._consumer is None or self._task is None:
            raise RuntimeError(f"the reader of {self.topic} is not started")
        if self._task.done():
            raise RuntimeError(f"the reader of {self.topic} has stopped")
        return self._consumer, self._task

    @staticmethod
    async def _reached(consumer: Consumer, ends: dict[TopicPartition, int]) -> bool:
        for tp, end in ends.items():
            if await consumer.position(tp) < end:
                return False
        return True

    async def _wait_for_assignment(self, consumer: Consumer) -> None:
        """The topic may still be propagating after creation: wait, bounded, for its partitions."""
        deadline = time.monotonic() + self._metadata_timeout_s
        while not consumer.assignment():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"topic {self.topic} not found in cluster metadata")
            await asyncio.sleep(0.1)

    @staticmethod
    async def _seek_to_tail(consumer: Consumer, records: int) -> None:
        partitions = list(consumer.assignment())
        per_partition = -(-records // len(partitions))
        begins = await consumer.beginning_offsets(partitions)
        ends = await consumer.end_offsets(partitions)
        for tp in partitions:
            consumer.seek(tp, max(begins[tp], ends[tp] - per_partition))

    async def _follow(self, consumer: Consumer) -> None:
        while True:
            try:
                batches = await consumer.getmany(
                    timeout_ms=self._poll_timeout_ms, max_records=self._max_records
                )
            except KafkaIOError as exc:  # the client reconnects by itself; back off and go on
                log.warning("reading %s failed (%s); retrying", self.topic, exc.reason)
                await asyncio.sleep(1.0)
                continue
            for records in batches.values():
                for record in records:
                    self._apply(record)
            # Wake whoever waits for progress; a fresh event for the next round.
            tick, self._tick = self._tick, asyncio.Event()
            tick.set()

    def _apply(self, record: Record) -> None:
        self.records += 1
        try:
            self._handler(record.key, record.value)
        except Exception:
            self.handler_errors += 1
            log.exception("skipping %s:%d@%d", record.topic, record.partition, record.offset)
