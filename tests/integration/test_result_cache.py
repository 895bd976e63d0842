"""The cluster-wide result cache on the real broker: workers share what they judged."""

from __future__ import annotations

import time
import timeit

import pytest

from kafkaio import AioClients, ProducerOptions, running
from rewardbus.observability.percentiles import Percentiles
from rewardbus.topics import ensure_topics
from sandbox_workers.cache_policy import to_cached
from sandbox_workers.fingerprint import fingerprint
from sandbox_workers.result_cache import ClusterResultCache, LocalResultCache
from schemas import (
    CachedResult,
    Completion,
    IoSuite,
    KafkaSettings,
    Limits,
    RewardEvent,
    TestOutcome,
    Verdict,
    encode,
    suite_digest,
)
from tests.support.broker_state import topic_configs
from tests.support.poll import until

pytestmark = pytest.mark.integration

SUITE = IoSuite(inputs=["2 3\n"], outputs=["5\n"])


def fp_of(code: str) -> str:
    return fingerprint("python", code, suite_digest(SUITE), Limits(), "test-runtime/1")


def accepted(sample_id: str = "s0") -> RewardEvent:
    return RewardEvent(
        sample_id=sample_id,
        batch_id="b0",
        score=1.0,
        verdict=Verdict.ACCEPTED,
        passed=1,
        total=1,
        tests=[TestOutcome(index=0, verdict=Verdict.ACCEPTED, wall_ms=12.5)],
        stdout_tail="5\n",
        exec_ms=40.0,
        worker_id="w-a",
    )


def new_cache(kafka: KafkaSettings, worker_id: str) -> ClusterResultCache:
    return ClusterResultCache(kafka, LocalResultCache(16 << 20), worker_id=worker_id)


async def test_result_cache_topic_is_compacted_and_expires(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    topic = kafka.topics.result_cache
    config = (await topic_configs(kafka, [topic]))[topic]
    assert set(config["cleanup.policy"].split(",")) == {"compact", "delete"}
    assert int(config["retention.ms"]) == 7 * 24 * 3600 * 1000


async def test_a_result_put_on_one_worker_is_a_hit_on_another(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    fp = fp_of("print(5)\n")
    async with new_cache(kafka, "w-a") as a, new_cache(kafka, "w-b") as b:
        assert await b.get(fp) is None
        assert await a.put(fp, accepted())
        await until(lambda: fp in b.local, "the entry to reach worker b", timeout_s=30)
        shared = await b.get(fp)
        assert shared == await a.get(fp)
        assert isinstance(shared, CachedResult)
        assert (shared.score, shared.verdict, shared.tests) == (
            1.0,
            Verdict.ACCEPTED,
            accepted().tests,
        )
        assert shared.worker_id == "w-a"

        # On b it is a hit for a new sample, without computing anything.
        async def never() -> RewardEvent:
            raise AssertionError("a hit must not execute")

        reward, hit = await b.get_or_compute(fp, Completion(sample_id="s9", batch_id="b9"), never)
        assert hit
        assert (reward.sample_id, reward.batch_id, reward.cache_hit) == ("s9", "b9", True)


async def test_a_late_worker_loads_earlier_entries(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    fps = [fp_of(f"print({i})\n") for i in range(20)]
    async with new_cache(kafka, "w-a") as a:
        for fp in fps:
            await a.put(fp, accepted())
        await until(
            lambda: a.stats.produced == len(fps), "the broker to ack every entry", timeout_s=30
        )
    async with new_cache(kafka, "w-late") as late:
        await late.wait_caught_up(30)
        assert all(fp in late.local for fp in fps)
        assert late.stats.loaded == len(fps)


async def test_start_up_replays_only_what_the_local_cache_can_hold(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    fps = [fp_of(f"print({i})\n") for i in range(200)]
    async with new_cache(kafka, "w-a") as a:
        for fp in fps:
            await a.put(fp, accepted())
        await until(
            lambda: a.stats.produced == len(fps), "the broker to ack every entry", timeout_s=30
        )
    # Room for about ten entries: the replay reads tens of records, not all 200.
    small = ClusterResultCache(kafka, LocalResultCache(max_bytes=10 * 340), worker_id="w-small")
    async with small:
        await small.wait_caught_up(30)
        assert 10 <= small.stats.loaded < 100
        assert small.local.size_bytes <= small.local.max_bytes
        assert len(small.local) >= 5


async def test_only_trustworthy_entries_are_shared(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    refused = fp_of("while True: pass\n")
    forged = fp_of("import os\n")
    good = fp_of("print(5)\n")
    producer = AioClients(kafka).producer(ProducerOptions())
    async with running(producer):
        topic = kafka.topics.result_cache
        # Garbage, a forged time limit, a key that is not the entry's fingerprint.
        await producer.send_and_wait(topic, b"\xc1 not msgpack", key=b"garbage")
        timed_out = RewardEvent(sample_id="x", verdict=Verdict.TIME_LIMIT)
        await producer.send_and_wait(
            topic, encode(to_cached(forged, timed_out)), key=forged.encode()
        )
        await producer.send_and_wait(topic, encode(to_cached(good, accepted())), key=b"other")
    async with new_cache(kafka, "w-a") as a, new_cache(kafka, "w-b") as b:
        assert not await a.put(refused, RewardEvent(sample_id="y", verdict=Verdict.TIME_LIMIT))
        assert await a.put(good, accepted())
        await until(lambda: a.stats.produced == 1, "the broker to ack the entry", timeout_s=30)
        await b.wait_caught_up(30)
        assert good in b.local
        assert refused not in b.local
        assert forged not in b.local
        assert b.stats.corrupt == 3


async def test_a_tombstone_withdraws_an_entry(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    fp = fp_of("print(5)\n")
    async with new_cache(kafka, "w-a") as a:
        await a.put(fp, accepted())
        await until(lambda: a.stats.produced == 1, "the broker to ack the entry", timeout_s=30)
        await a.wait_caught_up(30)
        producer = AioClients(kafka).producer(ProducerOptions())
        async with running(producer):
            await producer.send_and_wait(kafka.topics.result_cache, None, key=fp.encode())
        await a.wait_caught_up(30)
        assert fp not in a.local


async def test_wait_caught_up_needs_a_started_cache(kafka: KafkaSettings) -> None:
    with pytest.raises(RuntimeError, match="not started"):
        await new_cache(kafka, "w-a").wait_caught_up(1)


async def test_cross_worker_visibility_latency(kafka: KafkaSettings) -> None:
    """The numbers behind docs/result-cache.md (run with -s to see them)."""
    await ensure_topics(kafka, partitions=4)
    latencies_ms: list[float] = []
    async with new_cache(kafka, "w-a") as a, new_cache(kafka, "w-b") as b:
        await b.wait_caught_up(30)
        for i in range(200):
            fp = fp_of(f"print({i})\n")
            started = time.perf_counter()
            await a.put(fp, accepted())
            await until(lambda fp=fp: fp in b.local, "the entry to reach worker b", timeout_s=30)  # type: ignore[misc]
            latencies_ms.append((time.perf_counter() - started) * 1000)
        local = b.local
        some = fp_of("print(7)\n")
        per_get_us = min(timeit.repeat(lambda: local.get(some), number=100_000, repeat=5)) * 10
    seen = Percentiles.of(latencies_ms)
    print(
        f"\nresult cache: put on a -> visible on b: p50 {seen.p50} ms, p99 {seen.p99} ms, "
        f"max {seen.max} ms (n={len(latencies_ms)}); local get {per_get_us:.2f} us"
    )
    assert seen.p50 < 1000  # generous: only a broken reader (polling, not waking) fails this
