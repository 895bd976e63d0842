"""An in-memory Kafka for unit tests: the seam's clients with no broker behind them.

Small enough to read in one sitting, like httpx's ``MockTransport``. It models
topics with partitions and offsets; producers whose acks a test holds back
(:meth:`FakeBroker.hold_acks`) or fails (:meth:`FakeBroker.fail_next`); consumers on
their own (``assign``, or ``subscribe`` to every partition) or in a group: range
assignment over the members, every member's revoke callback before any assign,
positions reset to the group's commits after a rebalance, pause/resume, commits
recorded. It leaves out compaction, retention, transactions and real time:
``getmany`` returns as soon as something is appended, or at its timeout.
Integration tests use the real broker, never this.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Unpack

from kafkaio.errors import CommitFailed, KafkaIOError, ProduceError
from kafkaio.lifecycle import Lifecycle
from kafkaio.options import ConsumerOptions, ProducerOptions, TopicInfo, TopicSpec
from kafkaio.protocols import Headers, RebalanceListener, SendOptions
from kafkaio.records import Delivery, Record, TopicPartition

__all__ = ["FakeAdmin", "FakeBroker", "FakeConsumer", "FakeProducer"]

_Pending = tuple[asyncio.Future[Delivery], str, bytes | None, bytes | None, int | None, Headers]


@dataclass(frozen=True)
class _Delivered:
    topic: str
    partition: int
    offset: int


class FakeBroker:
    """Topics, groups and acks in memory; also the :class:`~kafkaio.Clients` that use them."""

    def __init__(self, *, partitions: int = 1) -> None:
        self.default_partitions = partitions
        self.logs: dict[str, list[list[Record]]] = {}
        # What each topic was created with through an admin (kept, not enforced).
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.committed: dict[str, dict[TopicPartition, int]] = {}
        self.commit_log: list[tuple[str, dict[TopicPartition, int]]] = []
        self.consumers: list[FakeConsumer] = []
        self._members: dict[str, list[FakeConsumer]] = {}
        self._unsettled: set[str] = set()
        self._held: dict[str, list[_Pending]] = {}
        self._failures: dict[str, list[KafkaIOError]] = {}
        self._appended = asyncio.Event()
        self._turn = 0

    # -- what tests arrange and inspect ---------------------------------------------------

    def create_topic(self, name: str, partitions: int | None = None) -> None:
        """Create ``name`` (``partitions`` or the broker's default) unless it exists."""
        self.logs.setdefault(name, [[] for _ in range(partitions or self.default_partitions)])

    def records(self, topic: str) -> list[Record]:
        """Everything acknowledged on ``topic``, partition by partition."""
        return [record for log in self.logs.get(topic, []) for record in log]

    def hold_acks(self, topic: str) -> None:
        """Records sent to ``topic`` from now on wait, unwritten and unacked, for a release."""
        self._held.setdefault(topic, [])

    def release_acks(self, topic: str) -> None:
        """Write and ack what waits for ``topic``, in order; later sends are acked at once."""
        for pending in self._held.pop(topic, []):
            self._ack(pending)

    def held(self, topic: str) -> int:
        """How many records wait for their ack on ``topic``."""
        return len(self._held.get(topic, []))

    def fail_next(self, topic: str, error: KafkaIOError) -> None:
        """The next send to ``topic`` fails with ``error`` (queue several for several)."""
        self._failures.setdefault(topic, []).append(error)

    async def rebalance(self, group_id: str) -> None:
        """Revoke every member's partitions (their listeners run), then assign them anew."""
        self._unsettled.discard(group_id)
        members = list(self._members.get(group_id, []))
        for member in members:
            await member._revoke()
        topics = sorted({topic for member in members for topic in member._topics})
        shares: list[set[TopicPartition]] = [set() for _ in members]
        for topic in topics:
            takers = [i for i, member in enumerate(members) if topic in member._topics]
            count = len(self.logs.get(topic, []))
            for partition in range(count):  # range: contiguous blocks, in member order
                shares[takers[partition * len(takers) // count]].add(
                    TopicPartition(topic, partition)
                )
        for member, share in zip(members, shares, strict=True):
            await member._assign_share(frozenset(share))

    # -- Clients ----------------------------------------------------------------------------

    def producer(self, options: ProducerOptions | None = None) -> FakeProducer:
        """A producer of this broker."""
        return FakeProducer(self)

    def consumer(self, options: ConsumerOptions | None = None) -> FakeConsumer:
        """A consumer of this broker (remembered in :attr:`consumers`)."""
        consumer = FakeConsumer(self, options or ConsumerOptions())
        self.consumers.append(consumer)
        return consumer

    def admin(self) -> FakeAdmin:
        """An admin client of this broker."""
        return FakeAdmin(self)

    # -- internals --------------------------------------------------------------------------

    def _produce(
        self, topic: str, value: bytes | None, options: SendOptions
    ) -> asyncio.Future[Delivery]:
        sent: asyncio.Future[Delivery] = asyncio.get_running_loop().create_future()
        failures = self._failures.get(topic)
        pending: _Pending = (
            sent,
            topic,
            value,
            options.get("key"),
            options.get("partition"),
            tuple(options.get("headers", ())),
        )
        if failures:
            sent.set_exception(failures.pop(0))
        elif topic not in self.logs:
            sent.set_exception(ProduceError(f"topic {topic} does not exist", retriable=True))
        elif topic in self._held:
            self._held[topic].append(pending)
        else:
            self._ack(pending)
        return sent

    def _ack(self, pending: _Pending) -> None:
        sent, topic, value, key, partition, headers = pending
        if sent.done():  # cancelled while held
            return
        partitions = self.logs[topic]
        if partition is None:
            self._turn += 1
            partition = zlib.crc32(key) if key is not None else self._turn
            partition %= len(partitions)
        log = partitions[partition]
        now_ms = int(time.time() * 1000)
        log.append(Record(topic, partition, len(log), key, value, headers, now_ms))
        sent.set_result(_Delivered(topic, partition, len(log) - 1))
        woken, self._appended = self._appended, asyncio.Event()
        woken.set()

    async def _wait_for_append(self, timeout_s: float) -> None:
        # Not wait_for: on 3.11 it swallows a cancel that comes as the wait ends (an
        # append), and a reader being stopped would then follow on for ever.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._appended.wait()


class _Client(Lifecycle):
    """A client of a :class:`FakeBroker`: nothing to connect or disconnect."""

    def __init__(self, broker: FakeBroker) -> None:
        self._broker = broker

    async def start(self) -> None:
        """Nothing to connect."""

    async def stop(self) -> None:
        """Nothing to disconnect (held acks stay held: the broker decides)."""


class FakeProducer(_Client):
    """A :class:`~kafkaio.Producer` of a :class:`FakeBroker`."""

    async def send(
        self, topic: str, value: bytes | None, **options: Unpack[SendOptions]
    ) -> asyncio.Future[Delivery]:
        """Queue a record; the future resolves on its ack."""
        return self._broker._produce(topic, value, options)

    async def send_and_wait(
        self, topic: str, value: bytes | None, **options: Unpack[SendOptions]
    ) -> Delivery:
        """Send and wait for the ack."""
        return await self._broker._produce(topic, value, options)

    async def partitions_for(self, topic: str) -> frozenset[int]:
        """The partition ids of ``topic``."""
        if topic not in self._broker.logs:
            raise KafkaIOError(f"topic {topic} does not exist", retriable=True)
        return frozenset(range(len(self._broker.logs[topic])))


class FakeConsumer(_Client):
    """A :class:`~kafkaio.Consumer` of a :class:`FakeBroker`; ``polls`` counts getmany calls.

    A group member joins at its first ``getmany`` (as aiokafka's does at start).
    """

    def __init__(self, broker: FakeBroker, options: ConsumerOptions) -> None:
        super().__init__(broker)
        self._options = options
        self._group = self.group_id = options.group_id
        self._topics: tuple[str, ...] = ()
        self._listener: RebalanceListener | None = None
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._positions: dict[TopicPartition, int] = {}
        self._rebalancing = False
        self.paused: set[TopicPartition] = set()
        self.polls = 0
        self.stopped = False

    async def stop(self) -> None:
        """Leave the group (no revoke callback, as with aiokafka); the rest rebalance."""
        self.stopped = True
        members = self._broker._members.get(self._group or "", [])
        if self in members:
            members.remove(self)
            self._assigned = frozenset()
            self._broker._unsettled.add(self._group or "")

    def subscribe(self, topics: Sequence[str], listener: RebalanceListener | None = None) -> None:
        """Follow ``topics``: the group's share, or (no group) every partition."""
        self._topics, self._listener = tuple(topics), listener
        members = self._broker._members.setdefault(self._group or "", [])
        if self._group is not None and self not in members:
            members.append(self)
            self._broker._unsettled.add(self._group)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions``."""
        self._assigned = frozenset(partitions)

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions read now."""
        if self._group is None and self._topics:  # partitions of topics created later too
            logs = self._broker.logs
            return frozenset(
                TopicPartition(t, p) for t in self._topics for p in range(len(logs.get(t, [])))
            )
        return self._assigned

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[Record]]:
        """What was appended past the positions, waiting up to ``timeout_ms`` for something."""
        self.polls += 1
        if self._group in self._broker._unsettled:
            await self._broker.rebalance(self._group)  # joining (or after a member left)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        room = max_records or self._options.max_poll_records or 500
        while True:
            fetched = self._take(partitions or tuple(sorted(self.assignment())), room)
            remaining = deadline - loop.time()
            if fetched or remaining <= 0:
                return fetched
            await self._broker._wait_for_append(remaining)

    def pause(self, *partitions: TopicPartition) -> None:
        """Fetch nothing from ``partitions``."""
        self.paused.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch from ``partitions`` again."""
        self.paused.difference_update(partitions)

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Record the commit; CommitFailed for partitions this member does not hold."""
        if self._group is None:
            raise KafkaIOError("offset commit failed: the consumer has no group")
        foreign = set(offsets) - self._assigned
        if foreign:
            raise CommitFailed(f"offset commit failed: {sorted(foreign)} are not assigned")
        self._broker.committed.setdefault(self._group, {}).update(offsets)
        self._broker.commit_log.append((self._group, dict(offsets)))

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset``."""
        self._positions[partition] = offset

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read ``partitions`` from offset 0."""
        for tp in partitions:
            self._positions[tp] = 0

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read only what comes next."""
        for tp in partitions:
            self._positions[tp] = self._end(tp)

    async def position(self, partition: TopicPartition) -> int:
        """The next offset to be fetched."""
        return self._position(partition)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The log's end once this member has fetched (as a fetch response tells aiokafka)."""
        if partition not in self.assignment() or self.polls == 0:
            return None
        return self._end(partition)

    async def beginning_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """0 everywhere: nothing is ever deleted."""
        return dict.fromkeys(partitions, 0)

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The length of each partition's log."""
        return {tp: self._end(tp) for tp in partitions}

    def _end(self, tp: TopicPartition) -> int:
        return len(self._broker.logs[tp.topic][tp.partition])

    def _position(self, tp: TopicPartition) -> int:
        if tp not in self._positions:
            committed = self._broker.committed.get(self._group or "", {}).get(tp)
            if committed is None:
                committed = 0 if self._options.from_beginning else self._end(tp)
            self._positions[tp] = committed
        return self._positions[tp]

    def _take(
        self, partitions: Sequence[TopicPartition], room: int
    ) -> dict[TopicPartition, list[Record]]:
        fetched: dict[TopicPartition, list[Record]] = {}
        if self._rebalancing:  # nothing is fetched while the partitions move
            return fetched
        owned = self.assignment()
        for tp in partitions:
            if room <= 0 or tp in self.paused or tp not in owned:
                continue
            start = self._position(tp)
            chunk = self._broker.logs[tp.topic][tp.partition][start : start + room]
            if chunk:
                fetched[tp] = chunk
                room -= len(chunk)
                self._positions[tp] = start + len(chunk)
        return fetched

    async def _revoke(self) -> None:
        self._rebalancing = True
        if self._listener is not None:
            await self._listener.on_partitions_revoked(self._assigned)
        self._assigned = frozenset()
        self._positions.clear()  # the next owner starts from the last commit
        self.paused.clear()

    async def _assign_share(self, share: frozenset[TopicPartition]) -> None:
        self._assigned, self._rebalancing = share, False
        if self._listener is not None:
            await self._listener.on_partitions_assigned(share)


class FakeAdmin(_Client):
    """An :class:`~kafkaio.Admin` of a :class:`FakeBroker` (one broker, one replica)."""

    async def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """Those of ``names`` that exist."""
        logs = self._broker.logs
        return {name: TopicInfo(name, len(logs[name]), 1) for name in names if name in logs}

    async def create_topics(self, specs: Sequence[TopicSpec]) -> None:
        """Create the missing ones (their configs are kept, not enforced)."""
        for spec in specs:
            if spec.name not in self._broker.logs:
                self._broker.topic_configs[spec.name] = dict(spec.config)
            self._broker.create_topic(spec.name, spec.partitions)

    async def delete_topics(self, names: Sequence[str]) -> None:
        """Forget the topics."""
        for name in names:
            self._broker.logs.pop(name, None)
            self._broker.topic_configs.pop(name, None)

    async def broker_count(self) -> int:
        """One."""
        return 1

    async def stable_group_members(self, group_id: str) -> int:
        """The group's members, once the last join or leave has been settled."""
        if group_id in self._broker._unsettled:
            return 0
        return len(self._broker._members.get(group_id, []))
