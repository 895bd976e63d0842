"""The quarantine ledger's writes and its catch-up (sandbox_workers.attempts)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from kafkaio import FakeBroker, TopicPartition
from sandbox_workers.attempts import AttemptLedger, Quarantine
from schemas import Attempt, attempt_key, decode, encode

TOPIC = "unit.attempts"
COMPLETIONS = "unit.completions"


def written(broker: FakeBroker) -> list[tuple[int, int | None]]:
    """The ledger's entries in order: (record offset, count; None for a tombstone)."""
    return [
        (
            int(entry.key.rsplit(b":", 1)[1]),
            None if entry.value is None else decode(entry.value, Attempt).count,
        )
        for entry in broker.records(TOPIC)
        if entry.key is not None
    ]


@pytest.fixture
def broker() -> FakeBroker:
    broker = FakeBroker(partitions=1)
    broker.create_topic(TOPIC)
    return broker


@pytest.fixture
async def ledger(broker: FakeBroker) -> AsyncIterator[AttemptLedger]:
    producer = broker.producer()
    await producer.start()
    ledger = AttemptLedger(broker, producer, TOPIC, worker_id="w0", tombstone_delay_s=60.0)
    async with ledger:
        yield ledger
    await producer.stop()


async def test_a_finished_records_tombstone_rides_with_the_next_start(
    broker: FakeBroker, ledger: AttemptLedger
) -> None:
    """Sent on its own, a tombstone cost a produce request per completion; it waits for
    the next start's write, and goes out before it."""
    at = TopicPartition(COMPLETIONS, 0)
    assert await ledger.begin(at, 0) == 1
    await ledger.finish(at, 0)
    await asyncio.sleep(0.01)
    assert written(broker) == [(0, 1)]  # no tombstone yet
    assert await ledger.begin(at, 1) == 1
    assert written(broker) == [(0, 1), (0, None), (1, 1)]


async def test_a_tombstone_goes_out_alone_after_the_delay_and_at_stop(broker: FakeBroker) -> None:
    producer = broker.producer()
    await producer.start()
    at = TopicPartition(COMPLETIONS, 0)
    ledger = AttemptLedger(broker, producer, TOPIC, worker_id="w0", tombstone_delay_s=0.02)
    async with ledger:
        await ledger.begin(at, 0)
        await ledger.finish(at, 0)
        await asyncio.sleep(0.2)
        assert written(broker) == [(0, 1), (0, None)]  # no start came: the delay sent it
        await ledger.begin(at, 1)
        await ledger.finish(at, 1)
        ledger_stopping = written(broker)
    assert ledger_stopping == [(0, 1), (0, None), (1, 1)]
    assert written(broker) == [(0, 1), (0, None), (1, 1), (1, None)]  # stop sent the last
    await producer.stop()


async def test_no_record_is_admitted_before_the_ledger_has_caught_up(broker: FakeBroker) -> None:
    """The consumer hands a new partition's records over while the assignment's
    callback still reads the ledger: the refusal waits for it, or a record that has
    killed its workers would be judged as new."""
    key = attempt_key(COMPLETIONS, 0, 7)
    producer = broker.producer()
    await producer.start()
    await producer.send_and_wait(TOPIC, encode(Attempt(count=3, worker_id="w1")), key=key)
    release = asyncio.Event()

    class SlowLedger(AttemptLedger):
        async def caught_up(self, timeout_s: float = 30.0) -> None:
            await release.wait()
            await super().caught_up(timeout_s)

    async with SlowLedger(broker, producer, TOPIC, worker_id="w0") as ledger:
        quarantine = Quarantine(ledger, after=3)
        catching_up = asyncio.create_task(quarantine.caught_up())
        refusal = asyncio.create_task(quarantine.refusal(TopicPartition(COMPLETIONS, 0), 7))
        await asyncio.sleep(0.1)
        assert not refusal.done()
        release.set()
        await catching_up
        reason = await asyncio.wait_for(refusal, 5)
    assert reason is not None and "3 workers died" in reason
    await producer.stop()
