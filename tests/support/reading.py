"""Reading a topic in a test: everything on it now, or until enough has arrived.

Each reader assigns itself every partition (no consumer group, nothing committed)
and reads from the beginning, through the Kafka seam the components use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kafkaio import (
    AioClients,
    ConsumerOptions,
    Record,
    TopicPartition,
    assign_from,
    running,
    topic_partitions,
)
from schemas import KafkaSettings
from tests.support.poll import until

__all__ = ["end_offsets", "read_at_least", "read_topic", "read_until"]

# A topic a stage creates as it starts may not be there yet.
_TOPIC_WAIT_S = 60.0


async def read_until(
    kafka: KafkaSettings,
    topics: Sequence[str],
    done: Callable[[list[Record]], bool],
    *,
    what: str | Callable[[], str],
    timeout_s: float = 60,
    between: Callable[[], None] | None = None,
) -> list[Record]:
    """The records of ``topics`` from their beginning, read until ``done(records)``.

    ``what`` names what is awaited (a callable: asked at failure time); ``between``
    runs before each fetch (to tend something the test runs).
    """
    clients = AioClients(kafka)
    partitions = [
        tp
        for topic in topics
        for tp in await topic_partitions(clients, topic, timeout_s=_TOPIC_WAIT_S, poll_s=0.1)
    ]
    consumer = clients.consumer(ConsumerOptions())
    records: list[Record] = []

    async def fetched_enough() -> bool:
        if between is not None:
            between()
        batches = await consumer.getmany(timeout_ms=200)
        records.extend(record for batch in batches.values() for record in batch)
        return done(records)

    async with running(consumer):
        await assign_from(consumer, partitions, from_beginning=True)
        if not done(records):
            await until(
                fetched_enough,
                lambda: (
                    f"{what() if callable(what) else what} on {', '.join(topics)}"
                    f" ({len(records)} records read)"
                ),
                timeout_s=timeout_s,
                every_s=0,
            )
    return records


async def read_at_least(
    kafka: KafkaSettings, topic: str, count: int, *, timeout_s: float = 60
) -> list[bytes]:
    """The values on ``topic`` once at least ``count`` records are there."""
    records = await read_until(
        kafka,
        [topic],
        lambda read: len(read) >= count,
        what=f"{count} records",
        timeout_s=timeout_s,
    )
    return [record.value or b"" for record in records]


async def read_topic(kafka: KafkaSettings, topic: str, *, timeout_s: float = 30) -> list[bytes]:
    """The values on ``topic`` now: up to each partition's end offset when asked."""
    clients = AioClients(kafka)
    partitions = await topic_partitions(clients, topic, timeout_s=_TOPIC_WAIT_S, poll_s=0.1)
    consumer = clients.consumer(ConsumerOptions())
    records: list[Record] = []
    async with running(consumer):
        await assign_from(consumer, partitions, from_beginning=True)
        ends = await consumer.end_offsets(partitions)

        async def at_end() -> bool:
            if all([await consumer.position(tp) >= ends[tp] for tp in partitions]):
                return True
            batches = await consumer.getmany(timeout_ms=200)
            records.extend(record for batch in batches.values() for record in batch)
            return False

        await until(
            at_end,
            lambda: f"the end of {topic} ({len(records)} read)",
            timeout_s=timeout_s,
            every_s=0,
        )
    return [record.value or b"" for record in records]


async def end_offsets(kafka: KafkaSettings, topic: str) -> dict[TopicPartition, int]:
    """The next offset to be written on each partition of ``topic``."""
    clients = AioClients(kafka)
    partitions = await topic_partitions(clients, topic, timeout_s=_TOPIC_WAIT_S, poll_s=0.1)
    consumer = clients.consumer(ConsumerOptions())
    async with running(consumer):
        return await consumer.end_offsets(partitions)
