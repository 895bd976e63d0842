"""The shared test-suite store on the real broker: problems published once, resolved by id."""

from __future__ import annotations

import time

import pytest

from kafkaio import AioClients, ProducerOptions, running
from producers import RolloutProducer
from rewardbus.topics import ensure_topics
from sandbox_workers.problems import (
    DigestMismatch,
    ProblemNotFound,
    ProblemStore,
    ProblemTableBehind,
)
from schemas import (
    AssertSuite,
    Completion,
    IoSuite,
    KafkaSettings,
    ProblemRecord,
    TestSuite,
    encode,
    suite_digest,
)
from tests.support.broker_state import topic_configs

pytestmark = pytest.mark.integration

ADD = IoSuite(inputs=["2 3\n", "10 -4\n"], outputs=["5\n", "6\n"])
ADD_V2 = IoSuite(inputs=["2 3\n", "10 -4\n", "0 0\n"], outputs=["5\n", "6\n", "0\n"])


def problem(problem_id: str, suite: TestSuite) -> ProblemRecord:
    return ProblemRecord(problem_id=problem_id, digest=suite_digest(suite), tests=suite)


def referencing(problem_id: str, digest: str | None = None) -> Completion:
    return Completion(sample_id="s1", code="print(5)", problem_id=problem_id, tests_digest=digest)


async def publish(kafka: KafkaSettings, *records: ProblemRecord) -> None:
    async with RolloutProducer(kafka) as producer:
        for record in records:
            await producer.publish_problem(record)


async def test_problems_topic_is_compacted(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    config = (await topic_configs(kafka, [kafka.topics.problems]))[kafka.topics.problems]
    assert config["cleanup.policy"] == "compact"


async def test_resolves_a_published_problem_by_id(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    await publish(kafka, problem("add", ADD))
    async with ProblemStore(kafka) as store:
        assert await store.resolve(referencing("add", suite_digest(ADD))) == ADD
        assert await store.resolve(referencing("add")) == ADD  # the digest is optional
        assert await store.resolve_with_digest(referencing("add")) == (ADD, suite_digest(ADD))
        assert store.stats.problems == 1


async def test_waits_for_a_problem_published_after_start(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    async with ProblemStore(kafka) as store:
        await store.wait_caught_up(30)
        await publish(kafka, problem("late", ADD))
        # Published, acked, and resolved at once: the store catches up rather than failing.
        assert await store.resolve(referencing("late")) == ADD


async def test_a_digest_mismatch_is_an_error(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    await publish(kafka, problem("add", ADD))
    async with ProblemStore(kafka) as store:
        with pytest.raises(DigestMismatch) as caught:
            await store.resolve(referencing("add", suite_digest(ADD_V2)))
        assert "add" in caught.value.reason
        assert not caught.value.retriable


async def test_an_updated_problem_rejects_the_old_digest(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    await publish(kafka, problem("add", ADD))
    async with ProblemStore(kafka) as store:
        assert await store.resolve(referencing("add", suite_digest(ADD))) == ADD
        await publish(kafka, problem("add", ADD_V2))
        # A completion for the new version, resolved at once: the store catches up
        # instead of calling it a mismatch with the version it still holds.
        assert await store.resolve(referencing("add", suite_digest(ADD_V2))) == ADD_V2
        with pytest.raises(DigestMismatch):
            await store.resolve(referencing("add", suite_digest(ADD)))


async def test_an_unknown_problem_is_not_found_within_the_bounded_wait(
    kafka: KafkaSettings,
) -> None:
    await ensure_topics(kafka, partitions=4)
    await publish(kafka, problem("add", ADD))
    async with ProblemStore(kafka, lookup_timeout_s=10) as store:
        started = time.monotonic()
        with pytest.raises(ProblemNotFound) as caught:
            await store.resolve(referencing("no-such-problem"))
        # Caught up and gave up well before the bound: nothing more can arrive.
        assert time.monotonic() - started < 10
        assert "no-such-problem" in caught.value.reason
        assert not caught.value.retriable


async def test_a_table_that_cannot_catch_up_in_time_is_a_transient_fault_not_not_found(
    kafka: KafkaSettings,
) -> None:
    """Behind is not absent: the completion must be retried, not dead-lettered as unknown."""
    await ensure_topics(kafka, partitions=4)
    await publish(kafka, problem("add", ADD))
    async with ProblemStore(kafka, lookup_timeout_s=1e-6) as store:
        with pytest.raises(ProblemTableBehind) as caught:
            await store.resolve(referencing("add", suite_digest(ADD)))
        assert caught.value.retriable
        assert not isinstance(caught.value, ProblemNotFound)
        await store.wait_caught_up(30)
        assert await store.resolve(referencing("add", suite_digest(ADD))) == ADD


async def test_corrupt_records_are_skipped(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    wrong_digest = ProblemRecord(problem_id="forged", digest=suite_digest(ADD), tests=ADD_V2)
    producer = AioClients(kafka).producer(ProducerOptions())
    async with running(producer):
        topic = kafka.topics.problems
        await producer.send_and_wait(topic, b"\xc1 not msgpack", key=b"garbage")
        await producer.send_and_wait(topic, encode(wrong_digest), key=b"forged")
        await producer.send_and_wait(topic, encode(problem("add", ADD)), key=b"not-add")
    async with ProblemStore(kafka) as store:
        await store.wait_caught_up(30)
        assert store.stats.corrupt == 3
        assert store.stats.problems == 0
        for problem_id in ("garbage", "forged", "add", "not-add"):
            with pytest.raises(ProblemNotFound):
                await store.resolve(referencing(problem_id))


async def test_a_tombstone_withdraws_a_problem(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    await publish(kafka, problem("add", ADD))
    async with ProblemStore(kafka) as store:
        await store.wait_caught_up(30)
        producer = AioClients(kafka).producer(ProducerOptions())
        async with running(producer):
            await producer.send_and_wait(kafka.topics.problems, None, key=b"add")
        await store.wait_caught_up(30)
        with pytest.raises(ProblemNotFound):
            await store.resolve(referencing("add"))
        assert (store.stats.problems, store.stats.size_bytes) == (0, 0)


async def test_inline_tests_win_and_are_checked_against_their_digest(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    suite = AssertSuite(code="def check(f):\n    assert f(2, 3) == 5\n", entry_point="add")
    await publish(kafka, problem("add", ADD))
    async with ProblemStore(kafka) as store:
        inline = Completion(sample_id="s1", code="x", tests=suite, problem_id="add")
        assert await store.resolve(inline) == suite
        assert await store.resolve_with_digest(inline) == (suite, suite_digest(suite))
        with pytest.raises(DigestMismatch):
            await store.resolve(
                Completion(sample_id="s2", code="x", tests=suite, tests_digest=suite_digest(ADD))
            )
        with pytest.raises(ProblemNotFound, match="neither tests nor problem_id"):
            await store.resolve(Completion(sample_id="s3", code="x"))


async def test_over_budget_keeps_every_problem_and_says_so(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    await publish(kafka, *(problem(f"p{i}", ADD) for i in range(5)))
    async with ProblemStore(kafka, max_bytes=100, hot_bytes=1000) as store:
        await store.wait_caught_up(30)
        assert store.stats.over_budget
        for i in range(5):
            assert await store.resolve(referencing(f"p{i}")) == ADD
