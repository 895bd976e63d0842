"""The content-addressed result cache: judge a program once, reward every copy of it.

Three layers, from the inside out:

- :class:`LocalResultCache`: an in-process LRU with a byte budget. Lookups never
  leave the process.
- :class:`ClusterResultCache`: the local LRU kept filled from the compacted
  ``result-cache`` topic (key: fingerprint), so a result judged by one worker is
  a hit on every worker a few milliseconds later. Each worker replays the topic
  with a :class:`CompactedTopicReader` (no consumer group, every partition, from
  the beginning) and writes its own results to it fire-and-forget.
- In-worker coalescing (:meth:`ClusterResultCache.get_or_compute`): identical
  fingerprints in flight in one worker execute once.

Only results that would come out the same on any healthy worker are shared;
:func:`cacheable` says which. Why a compacted topic rather than Redis, with
measurements: ``docs/result-cache.md``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from schemas import (
    CachedResult,
    Completion,
    KafkaSettings,
    RewardEvent,
    SchemaError,
    Verdict,
    decode,
    encode,
)

__all__ = [
    "ByteLRU",
    "CacheStats",
    "ClusterResultCache",
    "CompactedTopicReader",
    "LocalResultCache",
    "cacheable",
    "to_cached",
    "to_reward",
]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# Half the smallest encoded entry (~250 bytes): sizing the start-up replay with
# it reads at least as much as the LRU can hold, never less.
_SMALLEST_ENTRY_BYTES = 128

# Verdicts that say more about the worker than about the program.
_UNTRUSTED = frozenset({Verdict.SANDBOX_ERROR, Verdict.TIME_LIMIT})


# -- the local LRU ------------------------------------------------------------------


class ByteLRU(Generic[K, V]):
    """A least-recently-used map bounded by the total size its callers declare.

    ``put`` evicts the least recently used entries until the new one fits; an
    entry larger than the whole budget is refused (``rejected``) rather than
    emptying the cache for nothing.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.rejected = 0

    def get(self, key: K) -> V | None:
        """The value for ``key`` (now the most recently used), or None."""
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return found[0]

    def put(self, key: K, value: V, size: int) -> bool:
        """Store ``value`` as ``size`` bytes; False when it is larger than the budget."""
        if size > self.max_bytes:
            self.rejected += 1
            return False
        self.discard(key)
        self._entries[key] = (value, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _key, (_value, evicted) = self._entries.popitem(last=False)
            self._bytes -= evicted
            self.evictions += 1
        return True

    def discard(self, key: K) -> None:
        """Forget ``key`` if present (not counted as an eviction)."""
        found = self._entries.pop(key, None)
        if found is not None:
            self._bytes -= found[1]

    @property
    def size_bytes(self) -> int:
        """The declared size of everything held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries


class LocalResultCache(ByteLRU[str, CachedResult]):
    """Cached results by fingerprint, bounded by their encoded size."""

    def put_result(self, entry: CachedResult, *, size: int | None = None) -> bool:
        """Store ``entry`` under its fingerprint; ``size`` defaults to its encoded length."""
        return self.put(entry.fingerprint, entry, len(encode(entry)) if size is None else size)


# -- what may be shared, and how ------------------------------------------------------


def cacheable(event: RewardEvent) -> bool:
    """Whether ``event`` may stand for every later execution with its fingerprint.

    Never: an infrastructure fault (``sandbox_error``); a time limit, on the
    whole or on any test, since it may have been measured under overload;
    anything judged by a degraded sandbox; a result that is itself a cache hit
    (its entry is already shared, and re-sharing would launder its age).
    """
    if event.cache_hit or event.degraded or event.verdict in _UNTRUSTED:
        return False
    return not any(test.verdict in _UNTRUSTED for test in event.tests)


def to_cached(fingerprint: str, event: RewardEvent, *, worker_id: str = "") -> CachedResult:
    """The judged fields of ``event``, keyed by ``fingerprint``."""
    return CachedResult(
        fingerprint=fingerprint,
        score=event.score,
        verdict=event.verdict,
        passed=event.passed,
        total=event.total,
        tests=event.tests,
        stdout_tail=event.stdout_tail,
        stderr_tail=event.stderr_tail,
        message=event.message,
        program_index=event.program_index,
        exec_ms=event.exec_ms,
        worker_id=event.worker_id or worker_id,
    )


def to_reward(cached: CachedResult, completion: Completion) -> RewardEvent:
    """The reward of ``completion`` from a cached result: its ids, the cached judgement.

    ``exec_ms`` is 0 (nothing ran); ``queue_ms`` and ``worker_id`` are the
    service's to fill in, as for any reward.
    """
    return RewardEvent(
        sample_id=completion.sample_id,
        batch_id=completion.batch_id,
        group_id=completion.group_id,
        policy_version=completion.policy_version,
        score=cached.score,
        verdict=cached.verdict,
        passed=cached.passed,
        total=cached.total,
        tests=cached.tests,
        stdout_tail=cached.stdout_tail,
        stderr_tail=cached.stderr_tail,
        message=cached.message,
        program_index=cached.program_index,
        exec_ms=0.0,
        cache_hit=True,
    )


def _trusted(entry: CachedResult) -> bool:
    """Whether :func:`cacheable` could have let ``entry`` through (old or foreign writers)."""
    return entry.verdict not in _UNTRUSTED and not any(
        test.verdict in _UNTRUSTED for test in entry.tests
    )


# -- replaying a compacted topic ------------------------------------------------------

RecordHandler = Callable[[bytes | None, bytes | None], None]


class CompactedTopicReader:
    """Replays one compacted topic into memory and keeps following it.

    No consumer group: every instance is assigned all partitions and starts from
    the beginning, so each process holds the whole table; with
    ``replay_records`` it starts that many records (split over the partitions)
    before the end instead, for a table that only keeps its newest entries
    anyway. ``handler(key, value)``
    is called for every record, in offset order per partition, synchronously
    after the fetch that returned it, so a position seen by
    :meth:`wait_caught_up` is always fully applied. ``value`` is None for a
    tombstone. The handler must not raise; if it does, the record is logged and
    skipped.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
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
        self._kafka = kafka
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._fetch_min_bytes = fetch_min_bytes
        self.topic = topic
        self._handler = handler
        self._metadata_timeout_s = metadata_timeout_s
        self._poll_timeout_ms = poll_timeout_ms
        self._max_records = max_records
        self._replay_records = replay_records
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._tick = asyncio.Event()
        self.records = 0
        self.handler_errors = 0

    async def start(self) -> None:
        """Connect, take every partition of the topic from the beginning, start following."""
        # Subscribing without a group assigns every partition (and any added
        # later); with nothing committed, each starts at the earliest offset.
        consumer = AIOKafkaConsumer(
            self.topic,
            **self._kafka.client_kwargs(),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            fetch_max_wait_ms=self._fetch_max_wait_ms,
            fetch_min_bytes=self._fetch_min_bytes,
        )
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
            partitions = list(consumer.assignment())
            ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
            while not await self._reached(consumer, ends):
                tick = asyncio.ensure_future(self._tick.wait())
                try:
                    await asyncio.wait({tick, task}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    tick.cancel()
                self._running()

    def _running(self) -> tuple[AIOKafkaConsumer, asyncio.Task[None]]:
        if self._consumer is None or self._task is None:
            raise RuntimeError(f"the reader of {self.topic} is not started")
        if self._task.done():
            raise RuntimeError(f"the reader of {self.topic} has stopped")
        return self._consumer, self._task

    @staticmethod
    async def _reached(consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> bool:
        for tp, end in ends.items():
            if await consumer.position(tp) < end:
                return False
        return True

    async def _wait_for_assignment(self, consumer: AIOKafkaConsumer) -> None:
        """The topic may still be propagating after creation: wait, bounded, for its partitions."""
        deadline = time.monotonic() + self._metadata_timeout_s
        while not consumer.assignment():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"topic {self.topic} not found in cluster metadata")
            await asyncio.sleep(0.1)

    @staticmethod
    async def _seek_to_tail(consumer: AIOKafkaConsumer, records: int) -> None:
        partitions = list(consumer.assignment())
        per_partition = -(-records // len(partitions))
        begins = await consumer.beginning_offsets(partitions)
        ends = await consumer.end_offsets(partitions)
        for tp in partitions:
            consumer.seek(tp, max(begins[tp], ends[tp] - per_partition))

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            try:
                batches = await consumer.getmany(
                    timeout_ms=self._poll_timeout_ms, max_records=self._max_records
                )
            except KafkaError as exc:  # the client retries connections itself; back off and go on
                log.warning("reading %s failed (%s); retrying", self.topic, exc)
                await asyncio.sleep(1.0)
                continue
            for records in batches.values():
                for record in records:
                    self._apply(record)
            # Wake whoever waits for progress; a fresh event for the next round.
            tick, self._tick = self._tick, asyncio.Event()
            tick.set()

    def _apply(self, record: Any) -> None:
        self.records += 1
        try:
            self._handler(record.key, record.value)
        except Exception:
            self.handler_errors += 1
            log.exception("skipping %s:%d@%d", record.topic, record.partition, record.offset)


# -- the cluster-wide cache -----------------------------------------------------------


@dataclass
class CacheStats:
    """What a :class:`ClusterResultCache` did, beyond its LRU's hits and misses."""

    coalesced: int = 0  # callers served by an identical execution in flight
    uncacheable: int = 0  # results judged but not shared (see cacheable())
    produced: int = 0  # entries the broker acknowledged
    produce_errors: int = 0
    dropped_puts: int = 0  # entries not published because the outbound queue was full
    loaded: int = 0  # entries read from the topic (including this worker's own)
    corrupt: int = 0  # records on the topic that were not valid, trusted entries


class ClusterResultCache:
    """A worker's view of the cluster-wide result cache (see the module doc).

    ``get`` answers from memory only; ``put`` stores locally and publishes in
    the background, through a queue of at most ``max_pending_puts`` entries (a
    full queue drops the publication, counted in ``stats.dropped_puts``: a cache
    may forget, the reward path must never wait on it). At start-up only the
    newest entries, as many as the local LRU could hold, are replayed.

    ``producer``, when given, is a started producer the caller owns and stops
    (the worker passes its reward producer: a put then usually travels in the
    same produce request as the reward it belongs to, instead of one of its own).
    Otherwise the cache runs its own, with ``linger_ms``.

    Puts linger up to ``linger_ms`` and the reader's fetches wait up to
    ``fetch_max_wait_ms`` to batch: answering every put with its own produce and
    one fetch per worker cost the broker more CPU than the reward path itself
    (~20 % of pipeline throughput on HumanEval). An entry reaches the other
    workers within ~``linger_ms + fetch_max_wait_ms``, small next to the
    executions it races (docs/result-cache.md).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        local: LocalResultCache,
        *,
        worker_id: str = "",
        max_pending_puts: int = 1024,
        linger_ms: int = 5,
        fetch_max_wait_ms: int = 25,
        producer: AIOKafkaProducer | None = None,
        drain_timeout_s: float = 5.0,
        metadata_timeout_s: float = 30.0,
    ) -> None:
        self._kafka = kafka
        self.local = local
        self._worker_id = worker_id
        self._drain_timeout_s = drain_timeout_s
        self._linger_ms = linger_ms
        self.stats = CacheStats()
        # Replaying more than the LRU can hold only to evict it again would make
        # start-up time grow with the topic; see docs/result-cache.md.
        self._reader = CompactedTopicReader(
            kafka,
            kafka.topics.result_cache,
            self._load,
            metadata_timeout_s=metadata_timeout_s,
            replay_records=local.max_bytes // _SMALLEST_ENTRY_BYTES,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_min_bytes=1 << 20,
        )
        self._outbound: asyncio.Queue[tuple[bytes, bytes]] = asyncio.Queue(max_pending_puts)
        self._shared_producer = producer
        self._producer: AIOKafkaProducer | None = None
        self._writer: asyncio.Task[None] | None = None
        self._in_flight: dict[str, asyncio.Future[CachedResult | None]] = {}

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Connect, start replaying the topic and start the background writer."""
        producer = self._shared_producer or AIOKafkaProducer(
            **self._kafka.client_kwargs(),
            acks=1,
            linger_ms=self._linger_ms,
            compression_type="lz4",
        )
        if self._shared_producer is None:
            await producer.start()
        try:
            await self._reader.start()
        except BaseException:
            if self._shared_producer is None:
                await producer.stop()
            raise
        self._producer = producer
        self._writer = asyncio.create_task(self._write(producer), name="result-cache writer")

    async def stop(self) -> None:
        """Publish what is queued (up to ``drain_timeout_s``), then disconnect."""
        await self._reader.stop()
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                async with asyncio.timeout(self._drain_timeout_s):
                    await self._outbound.join()
            except TimeoutError:
                log.warning("result cache: %d entries left unpublished", self._outbound.qsize())
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
        producer, self._producer = self._producer, None
        if producer is not None and self._shared_producer is None:
            await producer.stop()  # flushes what the writer handed over

    async def __aenter__(self) -> ClusterResultCache:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def wait_caught_up(self, timeout_s: float) -> None:
        """Return once every entry on the topic now is in the local cache (TimeoutError else)."""
        await self._reader.wait_caught_up(timeout_s)

    # -- lookups -----------------------------------------------------------------

    async def get(self, fingerprint: str) -> CachedResult | None:
        """The cached result for ``fingerprint``, from memory (no network round trip)."""
        return self.local.get(fingerprint)

    async def put(self, fingerprint: str, event: RewardEvent) -> bool:
        """Remember ``event`` under ``fingerprint`` here and on every worker.

        Returns False (and stores nothing) when :func:`cacheable` refuses it.
        Publication is in the background; its failures are counted and logged.
        """
        return self._remember(fingerprint, event) is not None

    async def get_or_compute(
        self,
        fingerprint: str,
        completion: Completion,
        compute: Callable[[], Awaitable[RewardEvent]],
    ) -> tuple[RewardEvent, bool]:
        """The reward of ``completion``, from the cache or from ``compute()``; and whether it hit.

        Calls with one fingerprint while a ``compute`` for it is running wait for
        that execution instead of starting their own. If its result is not
        shareable (:func:`cacheable`), or it fails or is cancelled, each waiter
        runs its own ``compute``: a time limit under load or a sandbox fault is
        measured afresh, not multiplied.
        """
        cached = self.local.get(fingerprint)
        if cached is not None:
            return to_reward(cached, completion), True
        leader = self._in_flight.get(fingerprint)
        if leader is not None:
            # shield: a waiter being cancelled must not cancel the shared result.
            shared = await asyncio.shield(leader)
            if shared is not None:
                self.stats.coalesced += 1
                return to_reward(shared, completion), True
            event = await compute()
            self._remember(fingerprint, event)  # this run may be shareable where the first was not
            return event, False
        return await self._lead(fingerprint, compute), False

    async def _lead(
        self, fingerprint: str, compute: Callable[[], Awaitable[RewardEvent]]
    ) -> RewardEvent:
        outcome: asyncio.Future[CachedResult | None] = asyncio.get_running_loop().create_future()
        self._in_flight[fingerprint] = outcome
        shared: CachedResult | None = None
        try:
            event = await compute()
            shared = self._remember(fingerprint, event)
            return event
        finally:
            del self._in_flight[fingerprint]
            outcome.set_result(shared)

    def _remember(self, fingerprint: str, event: RewardEvent) -> CachedResult | None:
        if not cacheable(event):
            self.stats.uncacheable += 1
            return None
        entry = to_cached(fingerprint, event, worker_id=self._worker_id)
        data = encode(entry)
        self.local.put_result(entry, size=len(data))
        try:
            self._outbound.put_nowait((fingerprint.encode(), data))
        except asyncio.QueueFull:
            self.stats.dropped_puts += 1
            if _worth_logging(self.stats.dropped_puts):
                log.warning(
                    "result cache: %d entries not published (queue full)", self.stats.dropped_puts
                )
        return entry

    # -- the topic ---------------------------------------------------------------

    def _load(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            self.stats.corrupt += 1
            return
        if value is None:  # a tombstone: the entry was withdrawn
            self.local.discard(key.decode())
            return
        try:
            entry = decode(value, CachedResult)
        except SchemaError as exc:
            self._corrupt(key, exc.reason)
            return
        if entry.fingerprint.encode() != key or not _trusted(entry):
            self._corrupt(key, f"entry for {entry.fingerprint} with verdict {entry.verdict}")
            return
        self.stats.loaded += 1
        self.local.put_result(entry, size=len(value))

    def _corrupt(self, key: bytes, reason: str) -> None:
        self.stats.corrupt += 1
        log.warning("result cache: skipping record %r: %s", key[:80], reason)

    async def _write(self, producer: AIOKafkaProducer) -> None:
        topic = self._kafka.topics.result_cache
        while True:
            key, value = await self._outbound.get()
            try:
                sent: asyncio.Future[Any] = await producer.send(topic, value, key=key)
                sent.add_done_callback(self._published)
            except KafkaError as exc:
                self._produce_failed(exc)
            finally:
                self._outbound.task_done()

    def _published(self, sent: asyncio.Future[Any]) -> None:
        if sent.cancelled():
            return
        exc = sent.exception()
        if exc is None:
            self.stats.produced += 1
        else:
            self._produce_failed(exc)

    def _produce_failed(self, exc: BaseException) -> None:
        self.stats.produce_errors += 1
        if _worth_logging(self.stats.produce_errors):
            log.warning(
                "result cache: publishing failed (%d so far): %s", self.stats.produce_errors, exc
            )


def _worth_logging(count: int) -> bool:
    """1st, 2nd, 4th, 8th, ...: a persistent failure stays visible without flooding the log."""
    return count & (count - 1) == 0
