"""Consumer lag per partition, from what the consumer already knows (no broker round trip)."""

from __future__ import annotations

from kafkaio.errors import KafkaIOError
from kafkaio.protocols import Consumer
from kafkaio.records import TopicPartition

__all__ = ["partition_lags"]


async def partition_lags(consumer: Consumer) -> dict[TopicPartition, int]:
    """Records on the broker past the consumer's position, per assigned partition.

    The highwater mark comes with every fetch response, so this is as fresh as the
    last fetch; a partition not fetched from yet is left out rather than guessed.
    Lag counts records not yet fetched: those fetched and still being processed are
    the service's in-flight work, reported on their own.
    """
    lags: dict[TopicPartition, int] = {}
    for tp in consumer.assignment():
        mark = consumer.highwater(tp)
        if mark is None:
            continue
        try:
            position = await consumer.position(tp)
        except KafkaIOError:  # revoked meanwhile: the next owner reports it
            continue
        lags[tp] = max(0, mark - position)
    return lags
