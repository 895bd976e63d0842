"""Span attributes of the records that cross the seam, built in one place.

The messaging attributes follow OpenTelemetry's messaging conventions, so every
producer and consumer span (trainer, worker, aggregator) says the same thing the
same way; the completion attributes name a sample on every span about it.
"""

from __future__ import annotations

from kafkaio.records import Delivery, Record
from schemas import Completion

__all__ = [
    "SpanAttributes",
    "completion_attributes",
    "delivered_attributes",
    "process_attributes",
    "send_attributes",
]

SpanAttributes = dict[str, str | int]


def send_attributes(
    topic: str, *, partition: int | None = None, key: str | None = None
) -> SpanAttributes:
    """A producer span's attributes: the topic, and the partition and key when known."""
    attributes: SpanAttributes = {
        "messaging.system": "kafka",
        "messaging.operation.type": "send",
        "messaging.destination.name": topic,
    }
    if partition is not None:
        attributes["messaging.destination.partition.id"] = str(partition)
    if key is not None:
        attributes["messaging.kafka.message.key"] = key
    return attributes


def delivered_attributes(delivery: Delivery) -> SpanAttributes:
    """What a producer span learns once the broker acknowledged its record: where it went."""
    return {
        "messaging.destination.partition.id": str(delivery.partition),
        "messaging.kafka.offset": delivery.offset,
    }


def process_attributes(record: Record, group_id: str) -> SpanAttributes:
    """A consumer span's attributes: where the record was and who consumed it."""
    return {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.destination.name": record.topic,
        "messaging.destination.partition.id": str(record.partition),
        "messaging.kafka.partition": record.partition,
        "messaging.kafka.offset": record.offset,
        "messaging.consumer.group.name": group_id,
    }


def completion_attributes(completion: Completion) -> SpanAttributes:
    """What a span of this completion says about the sample (``rewardbus.*``)."""
    attributes: SpanAttributes = {
        "rewardbus.sample_id": completion.sample_id,
        "rewardbus.batch_id": completion.batch_id,
        "rewardbus.group_id": completion.group_id,
        "rewardbus.language": completion.language,
        "rewardbus.policy_version": completion.policy_version,
    }
    if completion.problem_id:
        attributes["rewardbus.problem_id"] = completion.problem_id
    return attributes
