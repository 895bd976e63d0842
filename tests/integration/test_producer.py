"""The trainer-side producer on the real broker."""

from __future__ import annotations

from collections import Counter

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kafkaio import Record
from producers import ProducerConfig, RolloutProducer
from rewardbus.topics import ensure_topics
from schemas import Completion, KafkaSettings, decode
from tests.support.reading import read_until

pytestmark = pytest.mark.integration


async def _read_all(kafka: KafkaSettings, count: int) -> list[Record]:
    return await read_until(
        kafka,
        [kafka.topics.completions],
        lambda read: len(read) >= count,
        what=f"{count} completions",
    )


async def test_completions_spread_evenly_over_partitions_keyed_by_sample_id(
    kafka: KafkaSettings, span_exporter: InMemorySpanExporter
) -> None:
    await ensure_topics(kafka, partitions=4)
    completions = [Completion(sample_id=f"s{i}", code=f"print({i})") for i in range(40)]
    async with RolloutProducer(kafka) as producer:
        await producer.publish_many(completions)
    records = await _read_all(kafka, 40)
    assert Counter(r.partition for r in records) == {0: 10, 1: 10, 2: 10, 3: 10}
    assert {r.key for r in records} == {c.sample_id.encode() for c in completions}
    # Each record carries the context of a span the producer recorded.
    traces = {f"{span.context.trace_id:032x}" for span in span_exporter.get_finished_spans()}
    carried = [dict(r.headers).get("traceparent", b"").decode() for r in records]
    assert all(parent.split("-")[1] in traces for parent in carried), carried[:3]
    assert {decode(r.value, Completion).sample_id for r in records} == {f"s{i}" for i in range(40)}


async def test_duplicate_programs_follow_their_first_copy(kafka: KafkaSettings) -> None:
    """8 distinct programs x 3 copies, interleaved: each program on one partition,
    the distinct programs still spread 2 per partition."""
    await ensure_topics(kafka, partitions=4)
    completions = [
        Completion(sample_id=f"s{copy}-{i}", problem_id="p", code=f"print({i})")
        for copy in range(3)
        for i in range(8)
    ]
    async with RolloutProducer(kafka) as producer:
        await producer.publish_many(completions)
    records = await _read_all(kafka, 24)
    program_of = {c.sample_id: c.code for c in completions}
    partitions_of: dict[str | None, set[int]] = {}
    for record in records:
        partitions_of.setdefault(program_of[record.key.decode()], set()).add(record.partition)
    assert all(len(p) == 1 for p in partitions_of.values()), partitions_of
    assert Counter(next(iter(p)) for p in partitions_of.values()) == {0: 2, 1: 2, 2: 2, 3: 2}


async def test_affinity_off_is_plain_round_robin(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    same = [Completion(sample_id=f"s{i}", code="print(1)") for i in range(8)]
    async with RolloutProducer(kafka, ProducerConfig(affinity_entries=0)) as producer:
        await producer.publish_many(same)
    records = await _read_all(kafka, 8)
    assert Counter(r.partition for r in records) == {0: 2, 1: 2, 2: 2, 3: 2}


async def test_affinity_forgets_the_least_recent_program_first(kafka: KafkaSettings) -> None:
    """With room for 2 programs, A B C A: the second A no longer follows the first."""
    await ensure_topics(kafka, partitions=4)
    programs = ["print('a')", "print('b')", "print('c')", "print('a')"]
    sent = [Completion(sample_id=f"s{i}", code=code) for i, code in enumerate(programs)]
    async with RolloutProducer(kafka, ProducerConfig(affinity_entries=2)) as producer:
        for completion in sent:  # one at a time: the order is what is tested
            await producer.publish(completion)
    partition_of = {r.key.decode(): r.partition for r in await _read_all(kafka, 4)}
    assert len({partition_of[f"s{i}"] for i in range(4)}) == 4  # all round-robin
