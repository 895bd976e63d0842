"""A worker started before its topics exist waits for them, creates none, and then serves.

A deployment creates its topics in a job that can finish after the workers start
(compose's `topics` service did). A consumer that subscribes to a missing topic is
assigned nothing until its next metadata refresh (minutes); on a broker that
auto-creates topics, its metadata request creates the topic itself, without the
configs `ensure_topics` gives it (the 16 MiB record limit of completions). The worker
waits for its topics before it subscribes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from kafkaio import (
    Admin,
    AioClients,
    Clients,
    Consumer,
    ConsumerOptions,
    Producer,
    ProducerOptions,
    TopicInfo,
    running,
)
from producers import RolloutProducer
from rewardbus.runtime.local import RewardWatcher
from rewardbus.topics import ensure_topics
from rewardbus.wiring import SandboxOptions, build_executor
from sandbox_workers.service import WorkerConfig, run_worker
from schemas import Completion, IoSuite, KafkaSettings
from tests.support.poll import until

pytestmark = pytest.mark.integration


async def _topics(kafka: KafkaSettings) -> set[str]:
    admin = AioClients(kafka).admin()
    async with running(admin):
        return set(await admin.describe_topics(kafka.topics.all()))


class _Lookups:
    """The worker's clients, counting its lookups of its topics (describe_topics)."""

    def __init__(self, inner: Clients) -> None:
        self.inner = inner
        self.count = 0

    def producer(self, options: ProducerOptions) -> Producer:
        return self.inner.producer(options)

    def consumer(self, options: ConsumerOptions) -> Consumer:
        return self.inner.consumer(options)

    def admin(self) -> Admin:
        return _CountedAdmin(self.inner.admin(), self)


class _CountedAdmin:
    def __init__(self, inner: Admin, lookups: _Lookups) -> None:
        self.inner = inner
        self.lookups = lookups

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        found = await self.inner.describe_topics(names)
        self.lookups.count += 1
        return found

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_a_worker_started_before_its_topics_waits_for_them(kafka: KafkaSettings) -> None:
    executor = build_executor(SandboxOptions(strict=True, worker_id="early"))
    config = WorkerConfig(group_id=f"{kafka.topics.prefix}workers", worker_id="early")
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ready = asyncio.Event()
    lookups = _Lookups(AioClients(kafka))
    worker = asyncio.create_task(
        run_worker(kafka, config, executor, shutdown=stop, ready=ready, clients=lookups)
    )
    try:
        # The worker is up, its topics are not: it looked, found none, and looks again
        # (it waits) instead of failing, creating them or subscribing.
        await until(
            lambda: lookups.count >= 3 or worker.done(), "the worker to look for its topics again"
        )
        assert not worker.done(), worker
        assert not ready.is_set()
        assert await _topics(kafka) == set()  # it created none of them
        await ensure_topics(kafka)
        await asyncio.wait_for(ready.wait(), 60)
        completion = Completion(
            sample_id="early-1",
            batch_id="b",
            code="print(int(input()) * 2)\n",
            tests=IoSuite(inputs=["21\n"], outputs=["42\n"]),
        )
        async with RewardWatcher(kafka) as watcher:
            async with RolloutProducer(kafka) as producer:
                await producer.publish(completion)
            await watcher.wait_for(1, timeout_s=60)
        assert watcher.rewards["early-1"].score == 1.0
    finally:
        stop.set_result(None)
        await asyncio.wait_for(worker, 60)
        await executor.aclose()
