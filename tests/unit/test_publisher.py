"""The publisher on the in-memory broker: where records go, and what a refusal raises."""

from __future__ import annotations

import pytest

from kafkaio import FakeBroker, ProduceError
from producers import ProducerConfig, ProducerError, PublishError, RolloutProducer
from schemas import BatchManifest, Completion, KafkaSettings, Topics, decode

KAFKA = KafkaSettings("fake:9092", topics=Topics(prefix="unit."))


def broker() -> FakeBroker:
    fake = FakeBroker(partitions=2)
    for topic in KAFKA.topics.all():
        fake.create_topic(topic)
    return fake


def completions(n: int) -> list[Completion]:
    return [Completion(sample_id=f"s{i}", batch_id="b", code=f"print({i})") for i in range(n)]


async def test_completions_alternate_partitions_and_manifests_are_keyed_by_batch() -> None:
    fake = broker()
    async with RolloutProducer(KAFKA, ProducerConfig(affinity_entries=0), clients=fake) as out:
        assert await out.publish_many(completions(4)) == 4
        await out.publish_manifest(BatchManifest(batch_id="b", sample_ids=["s0"]))
    placed = {r.key: r.partition for r in fake.records(KAFKA.topics.completions)}
    assert sorted(placed.values()) == [0, 0, 1, 1]
    (manifest,) = fake.records(KAFKA.topics.manifests)
    assert manifest.key == b"b"
    assert decode(manifest.value, BatchManifest).sample_ids == ["s0"]


@pytest.mark.parametrize("retriable", [True, False])
async def test_a_record_the_broker_refuses_is_a_publish_error(retriable: bool) -> None:
    fake = broker()
    async with RolloutProducer(KAFKA, clients=fake) as out:
        fake.fail_next(KAFKA.topics.completions, ProduceError("refused", retriable=retriable))
        with pytest.raises(PublishError) as caught:
            await out.publish_many(completions(3))
        fake.fail_next(KAFKA.topics.manifests, ProduceError("refused", retriable=retriable))
        with pytest.raises(ProducerError, match="refused"):
            await out.publish_manifest(BatchManifest(batch_id="b", sample_ids=["s0"]))
    assert caught.value.retriable is retriable
    assert "refused" in caught.value.reason
    assert len(fake.records(KAFKA.topics.completions)) == 2  # the others were acknowledged
