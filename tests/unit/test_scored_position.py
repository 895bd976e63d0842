"""ScoredBatches.position / start_at on the in-memory broker: a resumed reader takes exactly
what the saved one had not taken, however the batches were taken."""

from __future__ import annotations

import json

import pytest

from consumers import (
    LearnerCounters,
    LearnerSource,
    ScoredBatches,
    StalenessPolicy,
    StreamPosition,
)
from kafkaio import FakeBroker
from schemas import KafkaSettings, ScoredBatch, ScoredSample, Topics, encode

KAFKA = KafkaSettings("fake:9092", topics=Topics(prefix="unit."))


def broker(partitions: int = 2) -> FakeBroker:
    fake = FakeBroker(partitions=partitions)
    fake.create_topic(KAFKA.topics.scored)
    return fake


async def emit(fake: FakeBroker, *batch_ids: str, partition: int = 0) -> None:
    producer = fake.producer()
    async with producer:
        for batch_id in batch_ids:
            batch = ScoredBatch(batch_id=batch_id, samples=[ScoredSample(sample_id="s", score=1)])
            await producer.send_and_wait(KAFKA.topics.scored, encode(batch), partition=partition)


async def take_all(reader: ScoredBatches) -> list[str]:
    taken: list[str] = []
    while True:
        try:
            taken.append((await reader.next(timeout=0.05)).batch_id)
        except TimeoutError:
            return taken


def through_json(position: StreamPosition) -> StreamPosition:
    return StreamPosition.from_dict(json.loads(json.dumps(position.to_dict())))


async def test_a_reader_started_at_a_position_takes_exactly_the_rest() -> None:
    fake = broker()
    await emit(fake, "a", "b", "c", partition=0)
    await emit(fake, "x", partition=1)
    async with ScoredBatches(KAFKA, clients=fake) as first:
        # Taken out of order: c and x while a and b wait in the buffer.
        assert (await first.get("c", timeout=1)).batch_id == "c"
        assert (await first.get("x", timeout=1)).batch_id == "x"
        saved = through_json(first.position())
    assert saved.offsets == {0: 0, 1: 1}
    assert set(saved.taken) == {"c", "x"}
    await emit(fake, "d", partition=1)
    async with ScoredBatches(KAFKA, clients=fake, start_at=saved) as resumed:
        assert sorted(await take_all(resumed)) == ["a", "b", "d"]


async def test_a_copy_re_emitted_after_the_position_is_not_taken_again() -> None:
    fake = broker(partitions=1)
    await emit(fake, "a", "b")
    async with ScoredBatches(KAFKA, clients=fake) as first:
        assert await take_all(first) == ["a", "b"]
        saved = first.position()
    assert saved.offsets == {0: 2}
    # An aggregator that restarted before recording its emission sends b again.
    await emit(fake, "b", "c")
    async with ScoredBatches(KAFKA, clients=fake, start_at=saved) as resumed:
        assert await take_all(resumed) == ["c"]
        again = resumed.position()
    async with ScoredBatches(KAFKA, clients=fake, start_at=again) as twice:
        assert await take_all(twice) == []


async def test_a_fresh_reader_has_a_position_before_it_reads() -> None:
    fake = broker()
    await emit(fake, "old")
    async with ScoredBatches(KAFKA, clients=fake, from_beginning=False) as reader:
        saved = reader.position()
    assert saved.offsets == {0: 1, 1: 0}
    await emit(fake, "new")
    async with ScoredBatches(KAFKA, clients=fake, start_at=saved) as resumed:
        assert await take_all(resumed) == ["new"]


def test_a_position_is_refused_where_it_cannot_apply() -> None:
    saved = StreamPosition(topic=KAFKA.topics.scored, offsets={0: 3})
    with pytest.raises(ValueError, match="without a group"):
        ScoredBatches(KAFKA, group_id="learner", start_at=saved)
    other = KafkaSettings("fake:9092", topics=Topics(prefix="other."))
    with pytest.raises(ValueError, match=r"not 'other\.rollouts\.scored'"):
        ScoredBatches(other, start_at=saved)
    with pytest.raises(ValueError, match="not a scored-batch stream position"):
        StreamPosition.from_dict({"offsets": {}})
    with pytest.raises(ValueError, match="negative"):
        StreamPosition.from_dict({"topic": "t", "offsets": {"0": -1}})


async def test_the_learner_source_gives_its_readers_position_and_reports_skips() -> None:
    fake = broker(partitions=1)
    await emit(fake, "orphan", "mine")
    skipped: list[str] = []
    async with ScoredBatches(KAFKA, clients=fake) as reader:
        learn: LearnerSource[str, str] = LearnerSource(
            reader,
            max_in_flight=1,
            convert=pass_rollout,
            on_skip=lambda scored: skipped.append(scored.batch_id),
        )
        learn.hold("mine", "rollout")
        assert (await learn.next(timeout=1)).data == "rollout"
        assert skipped == ["orphan"]
        assert learn.position().offsets == {0: 2}


def pass_rollout(
    scored: ScoredBatch,
    rollout: str,
    /,
    *,
    learner_version: int | None,
    staleness: StalenessPolicy | None,
) -> tuple[str, LearnerCounters]:
    return rollout, LearnerCounters()
