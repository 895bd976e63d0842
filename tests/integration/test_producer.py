"""The trainer-side producer on the real broker."""

from __future__ import annotations

from collections import Counter

import pytest
from aiokafka import AIOKafkaConsumer

from producers import RolloutProducer
from rewardbus.topics import ensure_topics
from schemas import Completion, KafkaSettings, decode

pytestmark = pytest.mark.integration


async def test_completions_spread_evenly_over_partitions_keyed_by_sample_id(
    kafka: KafkaSettings,
) -> None:
    await ensure_topics(kafka, partitions=4)
    completions = [Completion(sample_id=f"s{i}", code="print(1)") for i in range(40)]
    async with RolloutProducer(kafka) as producer:
        await producer.publish_many(completions)
    consumer = AIOKafkaConsumer(
        kafka.topics.completions, **kafka.client_kwargs(), auto_offset_reset="earliest"
    )
    await consumer.start()
    records = []
    try:
        while len(records) < 40:
            batches = await consumer.getmany(timeout_ms=2000)
            assert batches, "completions did not arrive"
            records.extend(r for rs in batches.values() for r in rs)
    finally:
        await consumer.stop()
    assert Counter(r.partition for r in records) == {0: 10, 1: 10, 2: 10, 3: 10}
    assert {r.key for r in records} == {c.sample_id.encode() for c in completions}
    assert all(dict(r.headers).get("traceparent") for r in records)
    assert {decode(r.value, Completion).sample_id for r in records} == {f"s{i}" for i in range(40)}
