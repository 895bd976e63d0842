"""The learner-side reward client publishes through the trainer-side publisher, on the real broker.

A stand-in worker reads the completions topic (where each record landed, as what)
and answers every completion that names a reply topic, so the client's samples are
scored one at a time, in order, as a trainer's are published.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from consumers.reward_client import RewardClient
from kafkaio import AioClients, ConsumerOptions, ProducerOptions, Record, running
from producers import RolloutProducer
from rewardbus.topics import ensure_topics
from schemas import Completion, KafkaSettings, RewardEvent, Verdict, decode, encode

pytestmark = pytest.mark.integration

# Repeats of earlier programs among new ones: affinity and round-robin both decide.
PROGRAMS = [f"print({n})" for n in (1, 2, 1, 3, 2, 4, 5, 1, 6, 7, 3, 8)]


class _StandInWorker:
    """Keeps every completion record it reads; rewards those that name a reply topic."""

    def __init__(self, kafka: KafkaSettings, expect: int) -> None:
        self._kafka = kafka
        self._expect = expect
        self.records: dict[str, Record] = {}
        self.all_read = asyncio.Event()

    async def run(self) -> None:
        clients = AioClients(self._kafka)
        consumer = clients.consumer(ConsumerOptions(fetch_max_wait_ms=100))
        producer = clients.producer(ProducerOptions())
        async with running(consumer, producer):
            consumer.subscribe([self._kafka.topics.completions])
            while True:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    for record in records:
                        completion = decode(record.value, Completion)
                        self.records[completion.sample_id] = record
                        if completion.reply_topic is not None:
                            event = RewardEvent(
                                sample_id=completion.sample_id,
                                batch_id=completion.batch_id,
                                verdict=Verdict.ACCEPTED,
                                score=1.0,
                            )
                            await producer.send_and_wait(completion.reply_topic, encode(event))
                if len(self.records) >= self._expect:
                    self.all_read.set()


@pytest.fixture
async def stand_in_worker(kafka: KafkaSettings) -> AsyncIterator[_StandInWorker]:
    await ensure_topics(kafka, partitions=4)
    worker = _StandInWorker(kafka, expect=2 * len(PROGRAMS))
    task = asyncio.create_task(worker.run())
    yield worker
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_reward_client_places_completions_as_the_trainer_side_publisher_does(
    kafka: KafkaSettings, stand_in_worker: _StandInWorker, span_exporter: InMemorySpanExporter
) -> None:
    async with RolloutProducer(kafka) as producer:
        for i, code in enumerate(PROGRAMS):
            await producer.publish(Completion(sample_id=f"trainer-{i}", batch_id="b", code=code))
    async with RewardClient(kafka) as client:
        for i, code in enumerate(PROGRAMS):  # one at a time: the order decides the placement
            completion = Completion(sample_id=f"learner-{i}", batch_id="b", code=code)
            event = await client.score(completion, None, timeout_s=30)
            assert event.sample_id == completion.sample_id
        reply_topic = client.reply_topic
    await asyncio.wait_for(stand_in_worker.all_read.wait(), timeout=30)

    records = stand_in_worker.records
    trainer = [records[f"trainer-{i}"].partition for i in range(len(PROGRAMS))]
    learner = [records[f"learner-{i}"].partition for i in range(len(PROGRAMS))]
    assert learner == trainer
    assert set(trainer) == {0, 1, 2, 3}  # round-robin over distinct programs
    first_copy = {code: trainer[PROGRAMS.index(code)] for code in PROGRAMS}
    assert trainer == [first_copy[code] for code in PROGRAMS]  # repeats follow their first copy

    spans = {
        (s.attributes or {})["rewardbus.sample_id"]: s
        for s in span_exporter.get_finished_spans()
        if s.name == "publish completion"
    }
    for i in range(len(PROGRAMS)):
        record = records[f"learner-{i}"]
        assert record.key == f"learner-{i}".encode()
        assert decode(record.value, Completion).reply_topic == reply_topic
        headers = dict(record.headers)
        assert headers["content-type"] == b"application/msgpack"
        # The record carries its own publish span's context, and the span names the partition.
        span = spans[f"learner-{i}"]
        _, trace_id, span_id, _ = headers["traceparent"].decode().split("-")
        context = span.context
        assert context is not None
        assert (int(trace_id, 16), int(span_id, 16)) == (context.trace_id, context.span_id)
        assert (span.attributes or {})["messaging.destination.partition.id"] == str(learner[i])
