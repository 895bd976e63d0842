"""One contract, two implementations: every test runs on the in-memory fake and on the real broker.

What the components rely on from the seam is pinned here, so a unit test on
:class:`~kafkaio.FakeBroker` means what it would mean on Kafka.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from kafkaio import (
    AioClients,
    Clients,
    CommitFailed,
    CompactedTopicReader,
    Consumer,
    ConsumerOptions,
    DeadLetterWriter,
    FakeBroker,
    ProducerOptions,
    Record,
    TopicNotFound,
    TopicPartition,
    TopicSpec,
    ensure_topic,
    ensure_topics,
    partition_lags,
    running,
    table_specs,
    topic_partitions,
    wait_for_group,
    wait_for_topics,
)
from schemas import DeadLetter, KafkaSettings, Topics, decode
from tests.support.poll import until


def in_group(group: str) -> ConsumerOptions:
    """A group member that notices a rebalance within 100 ms (aiokafka's default is 3 s)."""
    return ConsumerOptions(group_id=group, session_timeout_ms=6000, heartbeat_interval_ms=100)


@pytest.fixture(
    params=["fake", pytest.param("real", marks=pytest.mark.integration)],
)
def clients(request: pytest.FixtureRequest) -> Clients:
    if request.param == "fake":
        return FakeBroker(partitions=2)
    kafka: KafkaSettings = request.getfixturevalue("kafka")
    return AioClients(kafka)


def name(what: str) -> str:
    return f"c{uuid.uuid4().hex[:10]}.{what}"


async def topic(clients: Clients, partitions: int = 1, **config: str) -> str:
    topic_name = name("t")
    admin = clients.admin()
    async with running(admin):
        await ensure_topic(admin, TopicSpec(topic_name, partitions, config=config), timeout_s=30)
    return topic_name


async def read(consumer: Consumer, count: int) -> list[Record]:
    got: list[Record] = []

    async def enough() -> bool:
        for records in (await consumer.getmany(timeout_ms=100)).values():
            got.extend(records)
        return len(got) >= count

    await until(enough, f"{count} records")
    return got


async def test_records_come_back_in_order_with_key_headers_and_timestamp(clients: Clients) -> None:
    t = await topic(clients)
    producer = clients.producer(ProducerOptions())
    consumer = clients.consumer(ConsumerOptions())
    async with running(producer, consumer):
        acked = await producer.send(t, b"v0", key=b"k0", headers=[("h", b"x")])
        first = await acked
        second = await producer.send_and_wait(t, b"v1", key=b"k1", partition=0)
        await producer.send_and_wait(t, None, key=b"k0")  # a tombstone
        consumer.assign([TopicPartition(t, 0)])
        records = await read(consumer, 3)
    assert (first.topic, first.partition, first.offset) == (t, 0, 0)
    assert second.offset == 1
    assert [(r.offset, r.key, r.value) for r in records] == [
        (0, b"k0", b"v0"),
        (1, b"k1", b"v1"),
        (2, b"k0", None),
    ]
    assert ("h", b"x") in list(records[0].headers)
    assert abs(records[0].timestamp_ms / 1000 - time.time()) < 120


async def test_offsets_positions_and_seeks(clients: Clients) -> None:
    t = await topic(clients)
    tp = TopicPartition(t, 0)
    producer = clients.producer(ProducerOptions())
    consumer = clients.consumer(ConsumerOptions())
    async with running(producer, consumer):
        for i in range(3):
            await producer.send_and_wait(t, b"%d" % i, partition=0)
        consumer.assign([tp])
        assert await consumer.end_offsets([tp]) == {tp: 3}
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        consumer.seek(tp, 2)
        assert [r.value for r in await read(consumer, 1)] == [b"2"]
        assert await consumer.position(tp) == 3
        await consumer.seek_to_beginning(tp)
        assert await consumer.position(tp) == 0
        await consumer.seek_to_end(tp)
        assert await consumer.position(tp) == 3
    assert consumer.assignment() == frozenset({tp})


async def test_highwater_and_lag_are_known_after_a_fetch(clients: Clients) -> None:
    t = await topic(clients)
    tp = TopicPartition(t, 0)
    producer = clients.producer(ProducerOptions())
    consumer = clients.consumer(ConsumerOptions(max_poll_records=2))
    async with running(producer, consumer):
        for i in range(5):
            await producer.send_and_wait(t, b"%d" % i, partition=0)
        assert consumer.highwater(tp) is None  # not assigned
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert await partition_lags(consumer) == {}  # nothing fetched: unknown, not 0
        first = await consumer.getmany(tp, timeout_ms=5000, max_records=2)
        assert [r.offset for r in first[tp]] == [0, 1]
        assert consumer.highwater(tp) == 5
        assert await partition_lags(consumer) == {tp: 3}
        await read(consumer, 3)
        assert await partition_lags(consumer) == {tp: 0}


async def test_pause_holds_a_partition_back_until_resume(clients: Clients) -> None:
    t = await topic(clients, partitions=2)
    p0, p1 = TopicPartition(t, 0), TopicPartition(t, 1)
    producer = clients.producer(ProducerOptions())
    consumer = clients.consumer(ConsumerOptions())
    async with running(producer, consumer):
        consumer.assign([p0, p1])
        consumer.pause(p0)
        await producer.send_and_wait(t, b"a", partition=0)
        await producer.send_and_wait(t, b"b", partition=1)
        assert [r.value for r in await read(consumer, 1)] == [b"b"]
        assert await consumer.position(p0) == 0
        consumer.resume(p0)
        assert [r.value for r in await read(consumer, 1)] == [b"a"]


async def test_a_group_member_resumes_from_what_the_last_one_committed(clients: Clients) -> None:
    t = await topic(clients)
    group = name("g")
    producer = clients.producer(ProducerOptions())
    async with running(producer):
        for i in range(4):
            await producer.send_and_wait(t, b"%d" % i)
        first = clients.consumer(in_group(group))
        first.subscribe([t])
        async with running(first):
            records = await read(first, 4)
            await first.commit({TopicPartition(t, 0): records[1].offset + 1})
            with pytest.raises(CommitFailed):
                await first.commit({TopicPartition(name("elsewhere"), 0): 1})
        second = clients.consumer(in_group(group))
        second.subscribe([t])
        async with running(second):
            assert [r.value for r in await read(second, 2)] == [b"2", b"3"]


class Listener:
    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        self.events.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        self.events.append(("assigned", assigned))


async def test_a_joining_member_makes_the_first_revoke_then_share(clients: Clients) -> None:
    t = await topic(clients, partitions=2)
    group = name("g")
    everything = frozenset({TopicPartition(t, 0), TopicPartition(t, 1)})
    a, b = Listener(), Listener()
    first = clients.consumer(in_group(group))
    second = clients.consumer(in_group(group))
    first.subscribe([t], listener=a)

    async def first_has_all() -> bool:
        await first.getmany(timeout_ms=50)
        return first.assignment() == everything

    async def shared() -> bool:
        await first.getmany(timeout_ms=50)
        await second.getmany(timeout_ms=50)
        return len(first.assignment()) == 1 and len(second.assignment()) == 1

    async with running(first):
        await until(first_has_all, "the first member to hold every partition")
        second.subscribe([t], listener=b)
        async with running(second):
            await until(shared, "the partitions to be shared")
    # (aiokafka also reports an empty revoke on the first join; the fake does the same)
    moves = [event for event in a.events if event[1]]
    assert moves[:2] == [("assigned", everything), ("revoked", everything)]
    assert a.events[-1][0] == "assigned" and len(a.events[-1][1]) == 1
    assert b.events[-1][0] == "assigned" and len(b.events[-1][1]) == 1


async def test_a_group_is_awaited_until_it_is_stable_with_its_members(clients: Clients) -> None:
    t = await topic(clients, partitions=2)
    group = name("g")
    first, second = clients.consumer(in_group(group)), clients.consumer(in_group(group))
    admin = clients.admin()

    async def consume_until(members: int) -> None:
        # Members join (and heartbeat) only while they poll: poll while the group is awaited.
        async def poll() -> None:
            while True:
                await first.getmany(timeout_ms=50)
                await second.getmany(timeout_ms=50)

        polling = asyncio.create_task(poll())
        try:
            await wait_for_group(admin, group, members, timeout_s=60)
        finally:
            polling.cancel()

    async with running(admin):
        assert await admin.stable_group_members(group) == 0  # no such group yet
        first.subscribe([t])
        second.subscribe([t])
        async with running(first, second):
            await consume_until(2)
            assert await admin.stable_group_members(group) == 2
            with pytest.raises(TimeoutError, match=f"fewer than 3 members joined '{group}'"):
                await wait_for_group(admin, group, 3, timeout_s=0.3)


async def test_admin_describes_creates_and_deletes_topics(clients: Clients) -> None:
    t = name("admin")
    admin = clients.admin()
    async with running(admin):
        assert await admin.describe_topics([t]) == {}
        with pytest.raises(TopicNotFound, match=t):
            await wait_for_topics(admin, [t], timeout_s=0.2)
        await admin.create_topics([TopicSpec(t, 2)])
        await admin.create_topics([TopicSpec(t, 2)])  # exists: left alone
        (info,) = (await wait_for_topics(admin, [t], timeout_s=30)).values()
        assert (info.name, info.partitions, info.replicas) == (t, 2, 1)
        partitions = await topic_partitions(clients, t, timeout_s=30)
        assert partitions == [TopicPartition(t, 0), TopicPartition(t, 1)]
        assert (await ensure_topic(admin, TopicSpec(t, 5), timeout_s=30)).partitions == 2
        assert await admin.broker_count() == 1
        await admin.delete_topics([t])

        async def gone() -> bool:
            return t not in await admin.describe_topics([t])

        await until(gone, f"{t} to be deleted")


async def test_the_table_reader_replays_and_follows(clients: Clients) -> None:
    t = await topic(clients, partitions=2)
    table: dict[bytes, bytes] = {}

    def apply(key: bytes | None, value: bytes | None) -> None:
        assert key is not None
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

    producer = clients.producer(ProducerOptions())
    async with running(producer):
        await producer.send_and_wait(t, b"1", key=b"a")
        await producer.send_and_wait(t, b"2", key=b"b")
        async with CompactedTopicReader(clients, t, apply, poll_timeout_ms=50) as reader:
            await reader.wait_caught_up(30)
            assert table == {b"a": b"1", b"b": b"2"}
            await producer.send_and_wait(t, None, key=b"a")
            await producer.send_and_wait(t, b"3", key=b"b")
            await reader.wait_caught_up(30)
            assert table == {b"b": b"3"}
    with pytest.raises(RuntimeError, match="not started"):
        await reader.wait_caught_up(1)


async def test_a_dead_letter_carries_the_record_and_the_reason(clients: Clients) -> None:
    dlq = await topic(clients)
    source = Record("completions", 3, 41, b"key", b"\xc1bytes", (), 0)
    producer = clients.producer(ProducerOptions())
    consumer = clients.consumer(ConsumerOptions())
    async with running(producer, consumer):
        writer = DeadLetterWriter(producer, dlq, service="test")
        await writer.write(
            source, reason="bad", error_type="SchemaError", stage="decode", backoff_s=0.01
        )
        sent = await writer.send(
            source, reason="worse", error_type="RewardUndeliverable", stage="emit"
        )
        await sent
        consumer.assign([TopicPartition(dlq, 0)])
        letters = [decode(r.value, DeadLetter) for r in await read(consumer, 2)]
    assert [(x.reason, x.error_type, x.stage) for x in letters] == [
        ("bad", "SchemaError", "decode"),
        ("worse", "RewardUndeliverable", "emit"),
    ]
    assert all(
        (x.source_topic, x.partition, x.offset, x.key, x.value, x.service)
        == ("completions", 3, 41, b"key", b"\xc1bytes", "test")
        for x in letters
    )


async def test_the_topic_table_is_created_once(clients: Clients) -> None:
    topics = Topics(prefix=name("table") + ".")
    admin = clients.admin()
    async with running(admin):
        found = await ensure_topics(admin, table_specs(topics, partitions=2), timeout_s=30)
        # Existing topics are left as they are, whatever the second caller asks for.
        again = await ensure_topics(admin, table_specs(topics, partitions=3), timeout_s=30)
        await admin.delete_topics(topics.all())
    assert found == again
    assert {info.name: info.partitions for info in found.values()} == {
        name: 1 if name == topics.dlq else 2 for name in topics.all()
    }
