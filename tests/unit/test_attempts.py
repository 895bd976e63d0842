"""The quarantine ledger's catch-up (sandbox_workers.attempts)."""

from __future__ import annotations

import asyncio

import pytest

from kafkaio import FakeBroker, TopicPartition
from sandbox_workers.attempts import AttemptLedger, Quarantine
from schemas import Attempt, attempt_key, encode

TOPIC = "unit.attempts"
COMPLETIONS = "unit.completions"


@pytest.fixture
def broker() -> FakeBroker:
    broker = FakeBroker(partitions=1)
    broker.create_topic(TOPIC)
    return broker


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
