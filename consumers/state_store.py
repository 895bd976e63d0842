"""The aggregator's compacted state topic: where per-batch state survives a crash.

State partition ``p`` holds the state of input partition ``p`` (rewards and
manifests are co-partitioned, and the state topic has the same partition count),
so an instance assigned input partition ``p`` restores exactly state partition
``p``. Writes are acknowledged before input offsets are committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from consumers.assembler import StateChange
from consumers.errors import ConsumerError
from kafkaio import (
    Clients,
    Consumer,
    ConsumerOptions,
    Delivery,
    Producer,
    TopicNotFound,
    TopicPartition,
    ensure_topic,
    running,
    table_spec,
    wait_for_topics,
)
from schemas import (
    AggregatorRecord,
    KafkaSettings,
    Replication,
    SchemaError,
    decode_state,
    encode_state,
)

__all__ = ["AggregatorError", "StateStore", "prepare_topics"]

log = logging.getLogger(__name__)

_RESTORE_POLL_MS = 200
# Restores read the state topic as written (it is never written in a transaction).
_READER = ConsumerOptions(read_committed=False)


class AggregatorError(ConsumerError):
    """A deployment problem the aggregator cannot work around (not retriable as is)."""


async def prepare_topics(kafka: KafkaSettings, *, wait_s: float, clients: Clients) -> int:
    """Check that manifests and rewards are co-partitioned; make sure the state topic exists.

    Returns the shared partition count. The state topic is created when missing (as
    the topic table says, with that partition count and the rewards topic's replica
    count); an existing one must have the same partition count.
    """
    topics = kafka.topics
    admin = clients.admin()
    async with running(admin):
        try:
            found = await wait_for_topics(
                admin, [topics.manifests, topics.rewards], timeout_s=wait_s
            )
        except TopicNotFound as exc:
            raise AggregatorError(exc.reason) from exc
        manifests, rewards = found[topics.manifests], found[topics.rewards]
        if manifests.partitions != rewards.partitions:
            raise AggregatorError(
                f"{topics.manifests} has {manifests.partitions} partitions and "
                f"{topics.rewards} has {rewards.partitions}: they must be co-partitioned "
                "(equal counts) so that one instance sees everything about a batch"
            )
        spec = table_spec(
            topics,
            "aggregator_state",
            partitions=rewards.partitions,
            replication=Replication(rewards.replicas),
        )
        state = await ensure_topic(admin, spec, timeout_s=30.0)
    if state.partitions != rewards.partitions:
        raise AggregatorError(
            f"state topic {state.name} has {state.partitions} partitions, the input topics "
            f"{rewards.partitions}: state partition p must hold the state of input partition p"
        )
    return rewards.partitions


class StateStore:
    """Writes state changes and reads a partition's state back."""

    def __init__(self, kafka: KafkaSettings, producer: Producer, clients: Clients) -> None:
        self._clients = clients
        self._topic = kafka.topics.aggregator_state
        self._producer = producer
        # Next offset after our own last write (or restore) per partition: if the
        # topic's end is still there, nobody else wrote since and memory is current.
        self._our_end: dict[int, int] = {}

    async def persist(self, changes: dict[int, list[StateChange]]) -> None:
        """Write the changes of each partition and wait until all are acknowledged."""
        pending: list[tuple[int, asyncio.Future[Delivery]]] = []
        for partition, writes in changes.items():
            for key, record in writes:
                value = None if record is None else encode_state(record)
                sent = await self._producer.send(self._topic, value, key=key, partition=partition)
                pending.append((partition, sent))
        for partition, sent in pending:
            metadata = await sent
            self._our_end[partition] = max(self._our_end.get(partition, 0), metadata.offset + 1)

    async def unchanged(self, partitions: Iterable[int]) -> set[int]:
        """Those of ``partitions`` whose state nobody but us wrote since we last did."""
        known = [p for p in partitions if p in self._our_end]
        if not known:
            return set()
        ends = await self._end_offsets(known)
        return {p for p in known if ends[p] == self._our_end[p]}

    async def restore(
        self, partitions: Iterable[int], timeout_s: float
    ) -> dict[int, list[AggregatorRecord]]:
        """The surviving records of each partition: the latest value per key, tombstones applied."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        consumer = self._clients.consumer(_READER)
        async with running(consumer):
            latest = await asyncio.wait_for(_read_to_end(consumer, self._topic, wanted), timeout_s)
        restored: dict[int, list[AggregatorRecord]] = {}
        for partition, (values, end) in latest.items():
            restored[partition] = _decode_all(partition, values.values())
            self._our_end[partition] = end
        return restored

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions no longer ours: their state must be restored if they come back."""
        for partition in partitions:
            self._our_end.pop(partition, None)

    async def _end_offsets(self, partitions: list[int]) -> dict[int, int]:
        consumer = self._clients.consumer(_READER)
        async with running(consumer):
            ends = await consumer.end_offsets([TopicPartition(self._topic, p) for p in partitions])
        return {tp.partition: offset for tp, offset in ends.items()}


async def _read_to_end(
    consumer: Consumer, topic: str, partitions: list[int]
) -> dict[int, tuple[dict[bytes, bytes], int]]:
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    # The end is taken once, up front: writes after it are not ours to restore.
    ends = await consumer.end_offsets(tps)
    latest: dict[int, dict[bytes, bytes]] = {p: {} for p in partitions}
    remaining = {tp for tp in tps if await consumer.position(tp) < ends[tp]}
    while remaining:
        fetched = await consumer.getmany(*remaining, timeout_ms=_RESTORE_POLL_MS)
        for tp, records in fetched.items():
            values = latest[tp.partition]
            for record in records:
                if record.offset >= ends[tp] or record.key is None:  # only we write it: keyed
                    continue
                if record.value is None:
                    values.pop(record.key, None)
                else:
                    values[record.key] = record.value
        remaining = {tp for tp in remaining if await consumer.position(tp) < ends[tp]}
    return {tp.partition: (latest[tp.partition], ends[tp]) for tp in tps}


def _decode_all(partition: int, values: Iterable[bytes]) -> list[AggregatorRecord]:
    records: list[AggregatorRecord] = []
    for value in values:
        try:
            records.append(decode_state(value))
        except SchemaError as exc:
            # Only we write this topic; a bad record means a newer or broken build.
            log.error(  # noqa: TRY400 - the reason says it all; a traceback would not help
                "state partition %d: unreadable record skipped: %s", partition, exc.reason
            )
    return records
