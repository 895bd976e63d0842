"""RewardWatcher on topics that already hold rewards (a deployment's long-lived topics).

From the beginning it reads them all; with ``from_end=True`` it reads only what is
written once it has started, so a demo against a deployment neither reads the whole
history nor counts an earlier run's rewards. Both on the real broker.
"""

from __future__ import annotations

import pytest

from kafkaio import AioClients, ProducerOptions, running
from rewardbus.runtime.local import RewardWatcher
from rewardbus.topics import ensure_topics
from schemas import KafkaSettings, RewardEvent, Verdict, encode

pytestmark = pytest.mark.integration


async def _publish(kafka: KafkaSettings, sample_ids: list[str]) -> None:
    producer = AioClients(kafka).producer(ProducerOptions())
    async with running(producer):
        for sample_id in sample_ids:
            event = RewardEvent(sample_id=sample_id, verdict=Verdict.ACCEPTED, score=1.0)
            await producer.send_and_wait(kafka.topics.rewards, encode(event))


async def test_from_end_reads_only_what_is_written_after_it_started(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka)
    earlier = [f"earlier-{i}" for i in range(5)]
    await _publish(kafka, earlier)
    async with (
        RewardWatcher(kafka) as everything,
        RewardWatcher(kafka, from_end=True) as new_only,
    ):
        # Written right after __aenter__ returned: the position was already resolved.
        await _publish(kafka, ["later-0", "later-1"])
        await everything.wait_for(7, timeout_s=60)
        await new_only.wait_for(2, timeout_s=60)
    assert set(everything.rewards) == {*earlier, "later-0", "later-1"}
    assert set(new_only.rewards) == {"later-0", "later-1"}


async def test_a_prefix_counts_only_that_runs_samples(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka)
    async with RewardWatcher(kafka, sample_prefix="run2-", from_end=True) as watcher:
        await _publish(kafka, ["run1-a", "run2-a", "run1-b", "run2-b"])
        await watcher.wait_for(2, timeout_s=60)
    assert set(watcher.rewards) == {"run2-a", "run2-b"}
