"""The content-addressed result cache: judge a program once, reward every copy of it.

Three layers, from the inside out:

- :class:`LocalResultCache`: an in-process LRU with a byte budget. Lookups never
  leave the process.
- :class:`ClusterResultCache`: the local LRU kept filled from the compacted
  ``result-cache`` topic (key: fingerprint), so a result judged by one worker is
  a hit on every worker a few milliseconds later. Each worker replays the topic
  with a :class:`~kafkaio.CompactedTopicReader` (no consumer group, every
  partition, from the beginning) and writes its own results to it fire-and-forget.
- In-worker coalescing (:meth:`ClusterResultCache.get_or_compute`): identical
  fingerprints in flight in one worker execute once.

What may be shared is :mod:`sandbox_workers.cache_policy`'s call. Why a
compacted topic rather than Redis, with measurements: ``docs/result-cache.md``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kafkaio import (
    AioClients,
    Clients,
    CompactedTopicReader,
    Delivery,
    KafkaIOError,
    Lifecycle,
    Producer,
    ProducerOptions,
)
from sandbox_workers.cache_policy import cacheable, to_cached, to_reward, trusted
from sandbox_workers.lru import ByteLRU
from schemas import (
    CachedResult,
    Completion,
    KafkaSettings,
    RewardEvent,
    SchemaError,
    decode,
    encode,
)

__all__ = ["CacheStats", "ClusterResultCache", "LocalResultCache"]

log = logging.getLogger(__name__)

# Half the smallest encoded entry (~250 bytes): sizing the start-up replay with
# it reads at least as much as the LRU can hold, never less.
_SMALLEST_ENTRY_BYTES = 128


class LocalResultCache(ByteLRU[str, CachedResult]):
    """Cached results by fingerprint, bounded by their encoded size."""

    def put_result(self, entry: CachedResult, *, size: int | None = None) -> bool:
        """Store ``entry`` under its fingerprint; ``size`` defaults to its encoded length."""
        return self.put(entry.fingerprint, entry, len(encode(entry)) if size is None else size)


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


class ClusterResultCache(Lifecycle):
    """A worker's view of the cluster-wide result cache (see the module doc).

    ``get`` answers from memory only; ``put`` stores locally and publishes in
    the background, through a queue of at most ``max_pending_puts`` entries (a
    full queue drops the publication, counted in ``stats.dropped_puts``: a cache
    may forget, the reward path must never wait on it). At start-up only the
    newest entries, as many as the local LRU could hold, are replayed.

    ``producer``, when given, is a started producer the caller owns and stops
    (the worker passes its reward producer: a put then usually travels in the
    same produce request as the reward it belongs to, instead of one of its own).
    Otherwise the cache runs its own, with ``linger_ms``. ``clients`` makes the
    Kafka clients (default: :class:`~kafkaio.AioClients` for ``kafka``; a
    :class:`~kafkaio.FakeBroker` in unit tests).

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
        producer: Producer | None = None,
        drain_timeout_s: float = 5.0,
        metadata_timeout_s: float = 30.0,
        clients: Clients | None = None,
    ) -> None:
        self._clients = clients or AioClients(kafka)
        self._topic = kafka.topics.result_cache
        self.local = local
        self._worker_id = worker_id
        self._drain_timeout_s = drain_timeout_s
        self._linger_ms = linger_ms
        self.stats = CacheStats()
        # Replaying more than the LRU can hold only to evict it again would make
        # start-up time grow with the topic; see docs/result-cache.md.
        self._reader = CompactedTopicReader(
            self._clients,
            self._topic,
            self._load,
            metadata_timeout_s=metadata_timeout_s,
            replay_records=local.max_bytes // _SMALLEST_ENTRY_BYTES,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_min_bytes=1 << 20,
        )
        self._outbound: asyncio.Queue[tuple[bytes, bytes]] = asyncio.Queue(max_pending_puts)
        self._shared_producer = producer
        self._producer: Producer | None = None
        self._writer: asyncio.Task[None] | None = None
        self._in_flight: dict[str, asyncio.Future[CachedResult | None]] = {}

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Connect, start replaying the topic and start the background writer."""
        producer = self._shared_producer or self._clients.producer(
            ProducerOptions(acks=1, idempotent=False, linger_ms=self._linger_ms, compression="lz4")
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
        if entry.fingerprint.encode() != key or not trusted(entry):
            self._corrupt(key, f"entry for {entry.fingerprint} with verdict {entry.verdict}")
            return
        self.stats.loaded += 1
        self.local.put_result(entry, size=len(value))

    def _corrupt(self, key: bytes, reason: str) -> None:
        self.stats.corrupt += 1
        log.warning("result cache: skipping record %r: %s", key[:80], reason)

    async def _write(self, producer: Producer) -> None:
        while True:
            key, value = await self._outbound.get()
            try:
                sent = await producer.send(self._topic, value, key=key)
                sent.add_done_callback(self._published)
            except KafkaIOError as exc:
                self._produce_failed(exc)
            finally:
                self._outbound.task_done()

    def _published(self, sent: asyncio.Future[Delivery]) -> None:
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
