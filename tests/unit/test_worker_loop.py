"""The sandbox worker's loop on the in-memory broker: backpressure, commits, rebalances, poison.

A fake :class:`~sandbox_workers.service.CompletionRunner` stands in for the
sandbox, so each test decides when a judgement finishes and how it fails.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import msgspec
import pytest

from kafkaio import FakeBroker, FakeConsumer, KafkaIOError, ProduceError, TopicPartition
from sandbox_workers.executor import InvalidCompletion
from sandbox_workers.problems import ProblemTableBehind
from sandbox_workers.service import WorkerConfig, WorkerStats, run_worker
from schemas import (
    Completion,
    DeadLetter,
    IoSuite,
    KafkaSettings,
    RewardEvent,
    TestSuite,
    Topics,
    Verdict,
    decode,
    encode,
)
from tests.support.poll import until

GROUP = "workers"
SUITE = IoSuite(inputs=["1\n"], outputs=["1\n"])


class Runner:
    """Judges instantly, unless a sample has a closed gate or errors queued for it."""

    def __init__(self) -> None:
        self.languages: dict[str, str] = {}
        self.calls: list[str] = []
        self.cancelled: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.errors: dict[str, list[BaseException]] = {}
        self._passed: set[str] = set()

    def gate(self, *sample_ids: str) -> None:
        for sample_id in sample_ids:
            self.gates[sample_id] = asyncio.Event()

    async def run(self, completion: Completion, suite: TestSuite | None = None) -> RewardEvent:
        sample_id = completion.sample_id
        self.calls.append(sample_id)
        gate = self.gates.get(sample_id)
        try:
            if gate is not None and sample_id not in self._passed:  # it holds the first call
                self._passed.add(sample_id)
                await gate.wait()
        except asyncio.CancelledError:
            self.cancelled.append(sample_id)
            raise
        errors = self.errors.get(sample_id)
        if errors:
            raise errors.pop(0)
        return RewardEvent(
            sample_id=sample_id,
            batch_id=completion.batch_id,
            score=1.0,
            verdict=Verdict.ACCEPTED,
            passed=1,
            total=1,
        )


@dataclass
class Worker:
    task: asyncio.Task[WorkerStats]
    stop: asyncio.Future[None]
    consumer: FakeConsumer
    stats: WorkerStats = field(default_factory=WorkerStats)


@pytest.fixture
def kafka() -> KafkaSettings:
    return KafkaSettings("fake:9092", topics=Topics(prefix="unit."))


@pytest.fixture
def broker(kafka: KafkaSettings) -> FakeBroker:
    broker = FakeBroker(partitions=1)
    for topic in kafka.topics.all():
        broker.create_topic(topic)
    return broker


def tp(kafka: KafkaSettings) -> TopicPartition:
    return TopicPartition(kafka.topics.completions, 0)


@asynccontextmanager
async def worker(
    broker: FakeBroker, kafka: KafkaSettings, runner: Runner, **config: float
) -> AsyncIterator[Worker]:
    """``run_worker`` in the background; stopped (and awaited) at the end of the block."""
    settings = WorkerConfig(
        group_id=GROUP,
        worker_id=f"w{len(broker.consumers)}",
        commit_interval_s=0.0,
        produce_retry_backoff_s=0.001,
        **{"result_cache_bytes": 0, **config},  # type: ignore[arg-type]
    )
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ready = asyncio.Event()
    stats = WorkerStats()
    task = asyncio.create_task(
        run_worker(kafka, settings, runner, shutdown=stop, ready=ready, stats=stats, clients=broker)
    )
    await until(lambda: ready.is_set() or task.done(), "the worker to start")
    (consumer,) = [c for c in broker.consumers if c.group_id == GROUP and not c.stopped]
    running = Worker(task, stop, consumer, stats)
    try:
        yield running
    finally:
        if not stop.done():
            stop.set_result(None)
        if not task.done():
            await asyncio.wait_for(asyncio.shield(task), 10)


async def publish(broker: FakeBroker, kafka: KafkaSettings, *values: bytes) -> None:
    producer = broker.producer()
    for value in values:
        await producer.send_and_wait(kafka.topics.completions, value, key=b"k")


def completion(sample_id: str, **fields: object) -> bytes:
    one = Completion(sample_id=sample_id, batch_id="b", code="print(1)", tests=SUITE)
    return encode(msgspec.structs.replace(one, **fields))


def committed(broker: FakeBroker, kafka: KafkaSettings) -> int:
    """The group's committed offset of the completions partition (0: nothing done yet)."""
    return broker.committed.get(GROUP, {}).get(tp(kafka), 0)


def rewards(broker: FakeBroker, kafka: KafkaSettings) -> list[str]:
    return [decode(r.value, RewardEvent).sample_id for r in broker.records(kafka.topics.rewards)]


def letters(broker: FakeBroker, kafka: KafkaSettings) -> list[DeadLetter]:
    return [decode(r.value, DeadLetter) for r in broker.records(kafka.topics.dlq)]


async def rounds(consumer: FakeConsumer, count: int) -> None:
    """Wait until the worker's fetch loop has gone round ``count`` more times."""
    seen = consumer.polls
    await until(lambda: consumer.polls >= seen + count, f"{count} fetch rounds")


# -- backpressure and commits ------------------------------------------------------------


async def test_fetching_pauses_at_the_in_flight_limit_and_resumes_when_a_slot_frees(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    runner = Runner()
    runner.gate("s0", "s1", "s2", "s3", "s4")
    async with worker(broker, kafka, runner, concurrency=1, max_in_flight=2) as w:
        await publish(broker, kafka, *(completion(f"s{i}") for i in range(5)))
        await until(lambda: w.consumer.paused == {tp(kafka)}, "the partition to be paused")
        assert (w.stats.consumed, w.stats.paused, runner.calls) == (2, 1, ["s0"])
        runner.gates["s0"].set()
        await until(lambda: w.stats.consumed == 3, "a third record once a slot freed")
        assert w.stats.paused == 2  # full again at once: paused again
        for gate in list(runner.gates.values()):
            gate.set()
        await until(lambda: committed(broker, kafka) == 5, "every offset to be committed")
        assert sorted(rewards(broker, kafka)) == [f"s{i}" for i in range(5)]
        await until(lambda: not w.consumer.paused, "the partition to be resumed")


async def test_an_offset_is_committed_only_after_its_reward_is_acknowledged(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    broker.hold_acks(kafka.topics.rewards)
    async with worker(broker, kafka, Runner()) as w:
        await publish(broker, kafka, completion("s0"))
        await until(lambda: broker.held(kafka.topics.rewards) == 1, "the reward to be sent")
        await rounds(w.consumer, 3)  # commits are due every round (commit_interval_s=0)
        assert committed(broker, kafka) == 0
        broker.release_acks(kafka.topics.rewards)
        await until(lambda: committed(broker, kafka) == 1, "the commit after the ack")
    assert rewards(broker, kafka) == ["s0"]


# -- rebalances and shutdown ---------------------------------------------------------------


async def test_a_revoke_drains_in_flight_work_and_commits_before_the_partition_moves(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    runner = Runner()
    runner.gate("s0")
    async with worker(broker, kafka, runner) as w:
        await publish(broker, kafka, completion("s0"))
        await until(lambda: runner.calls == ["s0"], "s0 to be judged")
        rebalance = asyncio.create_task(broker.rebalance(GROUP))
        for _ in range(5):  # let the revoke run up to its wait (a yield, not a timed wait)
            await asyncio.sleep(0)
        assert not rebalance.done()  # the revoke waits for the execution in flight
        runner.gates["s0"].set()
        await asyncio.wait_for(rebalance, 10)
        assert committed(broker, kafka) == 1  # committed in the revoke, before the reassign
        await rounds(w.consumer, 2)
        assert w.consumer.assignment() == {tp(kafka)}
    assert runner.calls == ["s0"]  # not redelivered: its offset was committed in time


async def test_work_past_the_drain_deadline_on_a_revoke_is_cancelled_and_redelivered(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    runner = Runner()
    runner.gate("s0")
    async with worker(broker, kafka, runner, drain_timeout_s=0.05) as w:
        await publish(broker, kafka, completion("s0"))
        await until(lambda: runner.calls == ["s0"], "s0 to be judged")
        await asyncio.wait_for(broker.rebalance(GROUP), 10)
        assert runner.cancelled == ["s0"]
        await until(lambda: committed(broker, kafka) == 1, "the redelivered s0 to be committed")
    assert runner.calls == ["s0", "s0"]
    assert rewards(broker, kafka) == ["s0"]
    assert w.stats.rewarded == 1


async def test_shutdown_cancels_work_that_outlasts_the_drain_deadline(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    runner = Runner()
    runner.gate("s0")
    async with worker(broker, kafka, runner, drain_timeout_s=0.1) as w:
        await publish(broker, kafka, completion("s0"))
        await until(lambda: runner.calls == ["s0"], "s0 to be judged")
        started = time.monotonic()
        w.stop.set_result(None)
        await asyncio.wait_for(asyncio.shield(w.task), 10)
        elapsed = time.monotonic() - started
    assert elapsed < 2.0  # the drain deadline (0.1 s) plus a fetch round, not the execution
    assert runner.cancelled == ["s0"]
    assert committed(broker, kafka) == 0  # left for the group to redeliver
    assert w.consumer.stopped


# -- poison ------------------------------------------------------------------------------


async def test_undecodable_input_is_dead_lettered_and_its_offset_moves_on(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    runner = Runner()
    async with worker(broker, kafka, runner):
        await publish(broker, kafka, b"\xc1 not msgpack", completion("s1"))
        await until(lambda: committed(broker, kafka) == 2, "both offsets to be committed")
    (letter,) = letters(broker, kafka)
    assert (letter.stage, letter.error_type, letter.value) == (
        "decode",
        "SchemaError",
        b"\xc1 not msgpack",
    )
    assert "Completion" in letter.reason
    assert runner.calls == ["s1"]


async def test_a_reply_topic_outside_this_deployment_is_dead_lettered(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    runner = Runner()
    async with worker(broker, kafka, runner):
        await publish(broker, kafka, completion("s0", reply_topic=kafka.topics.scored))
        await until(lambda: committed(broker, kafka) == 1, "the offset to be committed")
    (letter,) = letters(broker, kafka)
    assert letter.stage == "validate" and "is not a reply topic" in letter.reason
    assert runner.calls == [] and rewards(broker, kafka) == []


async def test_input_that_cannot_be_judged_is_dead_lettered_with_the_reason(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    runner = Runner()
    runner.errors["s0"] = [InvalidCompletion("unsupported language 'cobol'")]
    async with worker(broker, kafka, runner) as w:
        await publish(broker, kafka, completion("s0"), completion("s1"))
        await until(lambda: committed(broker, kafka) == 2, "both offsets to be committed")
        assert not w.task.done()
    (letter,) = letters(broker, kafka)
    assert (letter.stage, letter.error_type, letter.reason) == (
        "execute",
        "InvalidCompletion",
        "unsupported language 'cobol'",
    )
    assert rewards(broker, kafka) == ["s1"]


async def test_a_reward_the_broker_refuses_is_dead_lettered_and_the_partition_moves_on(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    broker.fail_next(kafka.topics.rewards, ProduceError("RecordTooLarge", retriable=False))
    async with worker(broker, kafka, Runner()):
        await publish(broker, kafka, completion("big"), completion("small"))
        await until(lambda: committed(broker, kafka) == 2, "both offsets to be committed")
    (letter,) = letters(broker, kafka)
    assert (letter.stage, letter.error_type) == ("emit", "RewardUndeliverable")
    assert "RecordTooLarge" in letter.reason and "1 try" in letter.reason
    assert rewards(broker, kafka) == ["small"]


async def test_retriable_produce_errors_are_retried_not_dead_lettered(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    for _ in range(2):
        broker.fail_next(kafka.topics.rewards, ProduceError("NotLeader", retriable=True))
    async with worker(broker, kafka, Runner()):
        await publish(broker, kafka, completion("s0"))
        await until(lambda: committed(broker, kafka) == 1, "the offset to be committed")
    assert rewards(broker, kafka) == ["s0"] and letters(broker, kafka) == []


async def test_a_retriable_fault_that_clears_is_judged(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    runner = Runner()
    runner.errors["s0"] = [ProblemTableBehind("the problems table is behind")]
    async with worker(broker, kafka, runner):
        await publish(broker, kafka, completion("s0"))
        await until(lambda: committed(broker, kafka) == 1, "the offset to be committed")
    assert runner.calls == ["s0", "s0"]
    assert rewards(broker, kafka) == ["s0"] and letters(broker, kafka) == []


async def test_a_persistent_retriable_fault_stops_the_worker_and_the_record_is_redelivered(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    runner = Runner()
    runner.errors["s0"] = [ProblemTableBehind("the problems table is behind")] * 3
    async with worker(broker, kafka, runner, transient_attempts=3) as w:
        await publish(broker, kafka, completion("s0"))
        with pytest.raises(ProblemTableBehind):
            await asyncio.wait_for(asyncio.shield(w.task), 10)
    assert runner.calls == ["s0"] * 3
    assert letters(broker, kafka) == [] and committed(broker, kafka) == 0
    # Another member of the group (here: the same runner, now healthy) gets it again.
    async with worker(broker, kafka, runner):
        await until(lambda: committed(broker, kafka) == 1, "the redelivered record")
    assert rewards(broker, kafka) == ["s0"] and letters(broker, kafka) == []


async def test_a_bug_in_judging_stops_the_worker_instead_of_dead_lettering_good_input(
    broker: FakeBroker, kafka: KafkaSettings, caplog: pytest.LogCaptureFixture
) -> None:
    runner = Runner()
    runner.errors["s0"] = [KeyError("language")]
    with caplog.at_level(logging.ERROR, logger="sandbox_workers.service"):
        async with worker(broker, kafka, runner) as w:
            await publish(broker, kafka, completion("s0"))
            with pytest.raises(KeyError):
                await asyncio.wait_for(asyncio.shield(w.task), 10)
    assert letters(broker, kafka) == [] and committed(broker, kafka) == 0
    assert w.consumer.stopped  # it left the group: its partitions move at once
    (logged,) = [r for r in caplog.records if r.exc_info]
    assert isinstance(logged.exc_info[1], KeyError)  # type: ignore[index]
    assert "will be redelivered" in logged.getMessage()
    async with worker(broker, kafka, runner):  # the fix deployed: the record comes back
        await until(lambda: committed(broker, kafka) == 1, "the redelivered record")
    assert rewards(broker, kafka) == ["s0"]


async def test_a_record_that_kills_worker_after_worker_is_quarantined(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    """The start count survives each worker it kills; past the limit it is dead-lettered."""
    runner = Runner()
    runner.errors["s0"] = [KeyError("bug") for _ in range(5)]
    await publish(broker, kafka, completion("s0"), completion("s1"))
    config = WorkerConfig(
        group_id=GROUP, quarantine_after=3, result_cache_bytes=0, produce_retry_backoff_s=0.001
    )
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for _death in range(3):  # each dies on s0 as soon as it starts
        with pytest.raises(KeyError):
            await asyncio.wait_for(
                run_worker(kafka, config, runner, shutdown=never, clients=broker), 10
            )
    assert letters(broker, kafka) == [] and runner.calls.count("s0") == 3
    async with worker(broker, kafka, runner, quarantine_after=3):
        await until(lambda: committed(broker, kafka) == 2, "both records done")
    (letter,) = letters(broker, kafka)
    assert letter.stage == "quarantine" and letter.error_type == "Quarantined"
    assert "3 workers died" in letter.reason
    assert runner.calls.count("s0") == 3  # never judged a fourth time
    assert "s1" in rewards(broker, kafka)


def _started(runner: Runner, sample_id: str, times: int) -> bool:
    return runner.calls.count(sample_id) == times


async def test_records_handed_back_at_the_drain_deadline_are_not_counted_as_deaths(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    runner = Runner()
    await publish(broker, kafka, completion("s0"))
    for starts in range(1, 5):
        runner.gate("s0")
        runner._passed.discard("s0")
        async with worker(broker, kafka, runner, quarantine_after=2, drain_timeout_s=0.05):
            await until(partial(_started, runner, "s0", starts), "s0 started")
    runner.gates.clear()
    async with worker(broker, kafka, runner, quarantine_after=2):
        await until(lambda: committed(broker, kafka) == 1, "s0 done")
    assert rewards(broker, kafka) == ["s0"] and letters(broker, kafka) == []


async def test_a_dead_letter_the_dlq_refuses_stops_the_worker(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    broker.fail_next(kafka.topics.dlq, ProduceError("RecordTooLarge", retriable=False))
    async with worker(broker, kafka, Runner()) as w:
        await publish(broker, kafka, b"\xc1 garbage")
        with pytest.raises(KafkaIOError, match="RecordTooLarge"):
            await asyncio.wait_for(asyncio.shield(w.task), 10)
    assert committed(broker, kafka) == 0  # nowhere further to send it: it waits


# -- the result cache -------------------------------------------------------------------


async def test_a_cached_verdict_answers_only_for_the_program_it_was_judged_on(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    """The cache key and the judge take the program by one rule (``program_of``): code
    when the completion has any, else the response's code block."""
    runner = Runner()
    runner.languages = {"python": "cpython-test"}
    fenced = "Here it is:\n```python\nprint(1)\n```\n"
    await publish(
        broker,
        kafka,
        completion("judged", code="print(1)"),
        completion("same-program", code=None, response=fenced),  # the same program: a hit
        completion("other-program", code="print(2)", response=fenced),  # code wins: judged
        completion("blank-code", code="  \n", response=fenced),  # the response's: a hit
    )
    async with worker(broker, kafka, runner, result_cache_bytes=1 << 20):
        await until(lambda: committed(broker, kafka) == 4, "all four done")
    assert runner.calls == ["judged", "other-program"]
    assert sorted(rewards(broker, kafka)) == [
        "blank-code",
        "judged",
        "other-program",
        "same-program",
    ]
