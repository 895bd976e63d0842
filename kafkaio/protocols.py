"""The narrow client interfaces the components use; aiokafka and the fake implement them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol, TypedDict, Unpack

from kafkaio.options import ConsumerOptions, ProducerOptions, TopicInfo, TopicSpec
from kafkaio.records import Delivery, Record, TopicPartition

__all__ = [
    "Admin",
    "Clients",
    "Consumer",
    "Producer",
    "Rebalance",
    "RebalanceListener",
    "SendOptions",
    "Startable",
]

Headers = Sequence[tuple[str, bytes]]


class SendOptions(TypedDict, total=False):
    """How a record is sent: its ``key``, its ``partition`` (default: by key), its ``headers``."""

    key: bytes | None
    partition: int | None
    headers: Headers


class Startable(Protocol):
    """Something with a start and a stop (see :func:`kafkaio.running`)."""

    async def start(self) -> None:
        """Connect."""
        ...

    async def stop(self) -> None:
        """Flush what is pending and disconnect."""
        ...


class RebalanceListener(Protocol):
    """Called by a group consumer around a rebalance (revoke before assign, on every member)."""

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        """The partitions are about to move: finish and commit what was fetched from them."""
        ...

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        """The new assignment, before fetching from it starts."""
        ...


class Rebalance:
    """A :class:`RebalanceListener` made of two coroutine functions."""

    def __init__(
        self,
        revoked: Callable[[frozenset[TopicPartition]], Awaitable[None]],
        assigned: Callable[[frozenset[TopicPartition]], Awaitable[None]],
    ) -> None:
        self._revoked = revoked
        self._assigned = assigned

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        """Hand the call on."""
        await self._revoked(revoked)

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        """Hand the call on."""
        await self._assigned(assigned)


class Producer(Startable, Protocol):
    """Sends records; errors are :class:`~kafkaio.KafkaIOError`."""

    async def send(
        self, topic: str, value: bytes | None, **options: Unpack[SendOptions]
    ) -> asyncio.Future[Delivery]:
        """Queue a record; the returned future resolves on its ack (or fails with ProduceError)."""
        ...

    async def send_and_wait(
        self, topic: str, value: bytes | None, **options: Unpack[SendOptions]
    ) -> Delivery:
        """Send a record and wait for its ack (ProduceError if there is none)."""
        ...

    async def partitions_for(self, topic: str) -> frozenset[int]:
        """The partition ids of ``topic``."""
        ...


class Consumer(Startable, Protocol):
    """Fetches records, in a group (``subscribe``) or on its own (``assign``)."""

    def subscribe(self, topics: Sequence[str], listener: RebalanceListener | None = None) -> None:
        """Follow ``topics``: the group's share of them, or every partition without a group."""
        ...

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions`` (no group)."""
        ...

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this consumer reads now."""
        ...

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[Record]]:
        """Records fetched since the last call (of ``partitions``, or of all), waiting up to
        ``timeout_ms`` for the first; an empty dict when none came."""
        ...

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching from ``partitions`` until :meth:`resume`."""
        ...

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch from ``partitions`` again."""
        ...

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit the next offset to read per partition (CommitFailed after a rebalance)."""
        ...

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` on."""
        ...

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read ``partitions`` from their first offset."""
        ...

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read only what is written to ``partitions`` from now on."""
        ...

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record to be fetched from ``partition``."""
        ...

    def highwater(self, partition: TopicPartition) -> int | None:
        """The offset the next record written to ``partition`` will get, as of the last
        fetch response (no broker round trip); None before the first fetch from it or
        for a partition not assigned."""
        ...

    async def beginning_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The first offset still held per partition."""
        ...

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset the next record written to each partition will get."""
        ...


class Admin(Startable, Protocol):
    """Topic administration."""

    async def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """Those of ``names`` that exist, with their partition and replica counts."""
        ...

    async def create_topics(self, specs: Sequence[TopicSpec]) -> None:
        """Create the topics; one that exists already is left as it is."""
        ...

    async def delete_topics(self, names: Sequence[str]) -> None:
        """Delete the topics (one that does not exist is no error)."""
        ...

    async def broker_count(self) -> int:
        """How many brokers the cluster has."""
        ...

    async def stable_group_members(self, group_id: str) -> int:
        """How many members consumer group ``group_id`` has once stable; 0 while it is
        rebalancing, empty or unknown."""
        ...


class Clients(Protocol):
    """Makes the clients of one cluster: aiokafka's (:class:`~kafkaio.AioClients`) or the fake's."""

    def producer(self, options: ProducerOptions) -> Producer:
        """A producer, not started."""
        ...

    def consumer(self, options: ConsumerOptions) -> Consumer:
        """A consumer, not started."""
        ...

    def admin(self) -> Admin:
        """An admin client, not started."""
        ...
