"""The seam over aiokafka: the only module of ours outside ``rewardbus`` that imports it.

Each wrapper holds one aiokafka client and adds no await and no copy of a payload on
the way: records are re-typed as :class:`~kafkaio.Record` (same bytes), partitions
are aiokafka's own class, and aiokafka's exceptions become :class:`~kafkaio.KafkaIOError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Any, Unpack

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaError,
    TopicAlreadyExistsError,
    for_code,
)
from aiokafka.protocol.metadata import MetadataRequest

from kafkaio.errors import CommitFailed, KafkaIOError, ProduceError
from kafkaio.lifecycle import Lifecycle
from kafkaio.options import ConsumerOptions, ProducerOptions, TopicInfo, TopicSpec
from kafkaio.protocols import RebalanceListener, SendOptions
from kafkaio.records import Delivery, Record, TopicPartition
from schemas import KafkaSettings

__all__ = ["AioAdmin", "AioClients", "AioConsumer", "AioProducer"]

_ASSIGNORS = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
# A healthy commit takes milliseconds and a coordinator moves in seconds; a broker that
# is gone would hold a commit for ever (aiokafka looks for the coordinator without end).
_COMMIT_TIMEOUT_S = 10.0


def _error(exc: KafkaError, what: str, kind: type[KafkaIOError] = KafkaIOError) -> KafkaIOError:
    return kind(f"{what} failed: {exc!r}", retriable=bool(getattr(exc, "retriable", False)))


def _given(**options: Any) -> dict[str, Any]:
    """The options that were set: None leaves aiokafka's default."""
    return {name: value for name, value in options.items() if value is not None}


class AioClients:
    """Makes aiokafka-backed clients for the cluster ``settings`` names."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings

    def producer(self, options: ProducerOptions) -> AioProducer:
        """A producer, not started."""
        return AioProducer(
            AIOKafkaProducer(
                **self.settings.client_kwargs(),
                acks=options.acks,
                enable_idempotence=options.idempotent,
                linger_ms=options.linger_ms,
                **_given(
                    compression_type=options.compression,
                    max_batch_size=options.max_batch_bytes,
                    max_request_size=options.max_request_bytes,
                    request_timeout_ms=options.request_timeout_ms,
                ),
            )
        )

    def consumer(self, options: ConsumerOptions) -> AioConsumer:
        """A consumer, not started."""
        return AioConsumer(
            AIOKafkaConsumer(
                **self.settings.client_kwargs(),
                group_id=options.group_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest" if options.from_beginning else "latest",
                isolation_level="read_committed" if options.read_committed else "read_uncommitted",
                partition_assignment_strategy=(_ASSIGNORS[options.assignor],),
                **_given(
                    group_instance_id=options.group_instance_id,
                    session_timeout_ms=options.session_timeout_ms,
                    heartbeat_interval_ms=options.heartbeat_interval_ms,
                    max_poll_records=options.max_poll_records,
                    fetch_max_wait_ms=options.fetch_max_wait_ms,
                    fetch_min_bytes=options.fetch_min_bytes,
                ),
            )
        )

    def admin(self) -> AioAdmin:
        """An admin client, not started."""
        return AioAdmin(AIOKafkaAdminClient(**self.settings.client_kwargs()))


class _Wrapped(Lifecycle):
    """One aiokafka client, started and stopped with its errors translated."""

    def __init__(self, client: Any, name: str) -> None:
        self._client = client
        self._name = name

    async def start(self) -> None:
        """Connect."""
        await _translated(self._client.start(), f"{self._name} start")

    async def stop(self) -> None:
        """Flush what is pending and disconnect."""
        try:
            await _translated(self._client.stop(), f"{self._name} stop")
        except asyncio.CancelledError:
            # A loop shutting down (asyncio.run) cancels every task first, aiokafka's
            # own fetches too, and its stop() awaits those: their CancelledError comes
            # out of it though nobody cancelled this task. Finish the disconnect then.
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            await self._client._client.close()


async def _translated(pending: Awaitable[Any], what: str) -> Any:
    try:
        return await pending
    except KafkaError as exc:
        raise _error(exc, what) from exc


class AioProducer(_Wrapped):
    """:class:`~kafkaio.Producer` over an ``AIOKafkaProducer``."""

    def __init__(self, client: AIOKafkaProducer) -> None:
        super().__init__(client, "producer")

    async def send(
        self, topic: str, value: bytes | None, **options: Unpack[SendOptions]
    ) -> asyncio.Future[Delivery]:
        """Queue a record; the future resolves on its ack or fails with ProduceError."""
        try:
            sent = await self._client.send(topic, value, **options)
        except KafkaError as exc:  # refused before it was queued (e.g. larger than a request)
            raise _error(exc, f"produce to {topic}", ProduceError) from exc
        acked: asyncio.Future[Delivery] = asyncio.get_running_loop().create_future()
        sent.add_done_callback(lambda done: _settle(acked, done, topic))
        return acked

    async def send_and_wait(
        self, topic: str, value: bytes | None, **options: Unpack[SendOptions]
    ) -> Delivery:
        """Send a record and wait for its ack (aiokafka's own future: no hand-over)."""
        try:
            delivery: Delivery = await (await self._client.send(topic, value, **options))
        except KafkaError as exc:
            raise _error(exc, f"produce to {topic}", ProduceError) from exc
        return delivery

    async def partitions_for(self, topic: str) -> frozenset[int]:
        """The partition ids of ``topic`` (waits for its metadata)."""
        found = await _translated(self._client.partitions_for(topic), f"metadata of {topic}")
        return frozenset(found)


def _settle(acked: asyncio.Future[Delivery], sent: asyncio.Future[Any], topic: str) -> None:
    """Hand aiokafka's ack on, its error translated."""
    if acked.done():
        return
    if sent.cancelled():
        acked.cancel()
        return
    exc = sent.exception()
    if exc is None:
        acked.set_result(sent.result())
    elif isinstance(exc, KafkaError):
        acked.set_exception(_error(exc, f"produce to {topic}", ProduceError))
    else:
        acked.set_exception(exc)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    """aiokafka insists on its own listener class; this one hands the calls on."""

    def __init__(self, listener: RebalanceListener) -> None:
        self._listener = listener

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._listener.on_partitions_revoked(frozenset(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._listener.on_partitions_assigned(frozenset(assigned))


class AioConsumer(_Wrapped):
    """:class:`~kafkaio.Consumer` over an ``AIOKafkaConsumer`` (``stop`` leaves the group)."""

    def __init__(self, client: AIOKafkaConsumer) -> None:
        super().__init__(client, "consumer")

    def subscribe(self, topics: Sequence[str], listener: RebalanceListener | None = None) -> None:
        """Follow ``topics``."""
        self._client.subscribe(
            list(topics), listener=_Listener(listener) if listener is not None else None
        )

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions``."""
        self._client.assign(list(partitions))

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions read now."""
        return frozenset(self._client.assignment())

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[Record]]:
        """Fetched records, re-typed (the bytes are aiokafka's, not copied)."""
        try:
            fetched = await self._client.getmany(
                *partitions, timeout_ms=timeout_ms, max_records=max_records
            )
        except KafkaError as exc:
            raise _error(exc, "fetch") from exc
        return {
            tp: [
                Record(r.topic, r.partition, r.offset, r.key, r.value, r.headers, r.timestamp)
                for r in records
            ]
            for tp, records in fetched.items()
        }

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching from ``partitions``."""
        self._client.pause(*partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch from ``partitions`` again."""
        self._client.resume(*partitions)

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit; CommitFailed when a rebalance took the partitions meanwhile.

        Also CommitFailed when the commit does not finish within ``_COMMIT_TIMEOUT_S``:
        aiokafka looks for a lost coordinator without end, and a worker whose broker
        died would otherwise never get past its commit, not even to stop.
        """
        try:
            async with asyncio.timeout(_COMMIT_TIMEOUT_S):
                await self._client.commit(dict(offsets))
        except TimeoutError:
            raise CommitFailed(
                f"offset commit timed out after {_COMMIT_TIMEOUT_S:.0f} s (no coordinator)",
                retriable=True,
            ) from None
        except (CommitFailedError, IllegalStateError) as exc:
            raise _error(exc, "offset commit", CommitFailed) from exc
        except KafkaError as exc:
            raise _error(exc, "offset commit") from exc

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset``."""
        self._client.seek(partition, offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read ``partitions`` from their start."""
        await _translated(self._client.seek_to_beginning(*partitions), "seek")

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read only what comes next."""
        await _translated(self._client.seek_to_end(*partitions), "seek")

    async def position(self, partition: TopicPartition) -> int:
        """The next offset to be fetched from ``partition``."""
        position: int = await _translated(self._client.position(partition), "position")
        return position

    def highwater(self, partition: TopicPartition) -> int | None:
        """The last fetch response's highwater mark (aiokafka asserts on an unassigned one)."""
        if partition not in self._client.assignment():
            return None
        mark: int | None = self._client.highwater(partition)
        return mark

    async def beginning_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The first offset still held per partition."""
        pending = self._client.beginning_offsets(list(partitions))
        found: dict[TopicPartition, int] = await _translated(pending, "beginning offsets")
        return found

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset to be written per partition."""
        pending = self._client.end_offsets(list(partitions))
        found: dict[TopicPartition, int] = await _translated(pending, "end offsets")
        return found


class AioAdmin(_Wrapped):
    """:class:`~kafkaio.Admin` over an ``AIOKafkaAdminClient``."""

    def __init__(self, client: AIOKafkaAdminClient) -> None:
        super().__init__(client, "admin")

    async def stop(self) -> None:
        """Disconnect."""
        await self._client.close()

    async def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """Those of ``names`` that exist (with at least one partition)."""
        # aiokafka's describe_topics asks for metadata allowing auto-creation: on a
        # broker with auto.create.topics.enable, describing a missing topic would
        # create it (with the default partition count). Ask without that.
        request = MetadataRequest(list(names), allow_auto_topic_creation=False)
        try:
            described = (await self._client._send_request(request)).to_object()["topics"]
        except KafkaError as exc:
            raise _error(exc, "describe topics") from exc
        return {
            info["topic"]: TopicInfo(
                info["topic"], len(info["partitions"]), len(info["partitions"][0]["replicas"])
            )
            for info in described
            if info["error_code"] == 0 and info["partitions"]
        }

    async def create_topics(self, specs: Sequence[TopicSpec]) -> None:
        """Create the topics; those that exist already are left alone."""
        wanted = [
            NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=dict(s.config))
            for s in specs
        ]
        try:
            response = await self._client.create_topics(wanted)
        except KafkaError as exc:
            raise _error(exc, "create topics") from exc
        for name, code, *_ in response.topic_errors:
            error = for_code(code)
            if code != 0 and error is not TopicAlreadyExistsError:  # another process was first
                raise _error(error(), f"creating topic {name}")

    async def delete_topics(self, names: Sequence[str]) -> None:
        """Delete the topics."""
        await _translated(self._client.delete_topics(list(names)), "delete topics")

    async def broker_count(self) -> int:
        """How many brokers the cluster metadata lists."""
        cluster = await _translated(self._client.describe_cluster(), "describe cluster")
        return len(cluster["brokers"])

    async def stable_group_members(self, group_id: str) -> int:
        """Members of ``group_id`` when its state is Stable, else 0."""
        described = await _translated(
            self._client.describe_consumer_groups([group_id]), "describe consumer group"
        )
        for response in described:
            for group in response.groups:
                # DescribeGroups: (error_code, group_id, state, protocol_type, protocol,
                # members, ...)
                if group[2] == "Stable":
                    return len(group[5])
        return 0
