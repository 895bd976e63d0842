"""The whole path on the real broker: producer → sandbox workers → aggregator → learner."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import msgspec
import pytest

import kafkaio
from consumers import ScoredBatches
from kafkaio import AioClients, ProducerOptions, ensure_topic, table_spec
from producers import RolloutProducer
from rewardbus.topics import await_group_members, ensure_topics
from sandbox_workers.service import WorkerStats
from schemas import (
    BatchManifest,
    Completion,
    DeadLetter,
    IoSuite,
    KafkaSettings,
    RewardEvent,
    decode,
    encode,
)
from tests.support.poll import until
from tests.support.reading import read_at_least
from tests.support.stages import aggregator, group_of, running, worker

pytestmark = pytest.mark.integration

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
SUB = "a, b = map(int, input().split())\nprint(a - b)\n"
SLOW_ADD = "import time\ntime.sleep(0.3)\n" + ADD


def _completions(batch_id: str, n: int, *, code: Callable[[int], str]) -> list[Completion]:
    suite = IoSuite(inputs=["2 3\n", "10 -4\n"], outputs=["5\n", "6\n"])
    return [
        Completion(
            sample_id=f"{batch_id}-s{i:03d}",
            batch_id=batch_id,
            group_id=f"{batch_id}-g{i // 5}",
            code=code(i),
            tests=suite,
        )
        for i in range(n)
    ]


def _manifest(
    batch_id: str, completions: list[Completion], deadline_s: float = 120
) -> BatchManifest:
    return BatchManifest(
        batch_id=batch_id,
        sample_ids=[c.sample_id for c in completions],
        group_ids=[c.group_id for c in completions],
        group_size=5,
        deadline=time.time() + deadline_s,
    )


async def test_fifty_completions_two_workers_each_scored_exactly_once(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    # Distinct programs (a comment differs) so the result cache cannot do the work.
    good = _completions("b1", 50, code=lambda i: f"# sample {i}\n" + (ADD if i % 2 == 0 else SUB))
    stats = [WorkerStats(), WorkerStats()]
    async with (
        running(aggregator(kafka)),
        running(worker(kafka, "w1", stats=stats[0])),
        running(worker(kafka, "w2", stats=stats[1])),
        ScoredBatches(kafka, group_id=group_of(kafka, "learner")) as learner,
    ):
        await await_group_members(kafka, group_of(kafka, "workers"), 2, timeout_s=60)
        async with RolloutProducer(kafka) as producer:
            await producer.publish_manifest(_manifest("b1", good))
            await producer.publish_many(good)
        batch = await learner.get("b1", timeout=120)
    assert batch.complete
    assert batch.missing == []
    assert [s.sample_id for s in batch.samples] == [c.sample_id for c in good]
    scores = {s.sample_id: s.score for s in batch.samples}
    assert all(scores[c.sample_id] == (1.0 if i % 2 == 0 else 0.0) for i, c in enumerate(good))
    # Both group members did work, and between them each sample exactly once.
    assert stats[0].rewarded > 0 and stats[1].rewarded > 0
    assert stats[0].rewarded + stats[1].rewarded == 50
    for group in batch.groups.values():
        assert group.count == 5


async def test_garbage_goes_to_the_dead_letter_topic_and_the_pipeline_keeps_going(
    kafka: KafkaSettings,
) -> None:
    await ensure_topics(kafka, partitions=4)
    good = _completions("b2", 6, code=lambda i: ADD)
    async with (
        running(aggregator(kafka)),
        running(worker(kafka, "w1")),
        ScoredBatches(kafka, group_id=group_of(kafka, "learner")) as learner,
    ):
        raw = AioClients(kafka).producer(ProducerOptions())
        async with kafkaio.running(raw):
            await raw.send_and_wait(kafka.topics.completions, b"\xc1\x00garbage", key=b"junk")
            await raw.send_and_wait(kafka.topics.completions, b'{"json": "not msgpack"}', key=b"j2")
        async with RolloutProducer(kafka) as producer:
            await producer.publish_manifest(_manifest("b2", good))
            await producer.publish_many(good)
        batch = await learner.get("b2", timeout=90)
    assert batch.complete and all(s.score == 1.0 for s in batch.samples)
    letters = [decode(v, DeadLetter) for v in await read_at_least(kafka, kafka.topics.dlq, 2)]
    assert {letter.key for letter in letters} == {b"junk", b"j2"}
    assert all(letter.stage == "decode" and "Completion" in letter.reason for letter in letters)
    assert b"\xc1\x00garbage" in {letter.value for letter in letters}


async def test_reply_topics_get_their_rewards_and_other_destinations_are_refused(
    kafka: KafkaSettings,
) -> None:
    """A completion may address its reward to a reply topic of this deployment, nothing else."""
    await ensure_topics(kafka, partitions=1)
    reply = kafka.topics.reply_topic("client-1")
    base = _completions("b9", 3, code=lambda i: ADD)
    to_reply = msgspec.structs.replace(base[0], reply_topic=reply)
    to_scored = msgspec.structs.replace(base[1], reply_topic=kafka.topics.scored)
    to_foreign = msgspec.structs.replace(base[2], reply_topic="other.rewardbus.replies.x")
    async with running(worker(kafka, "w1")):
        async with RolloutProducer(kafka) as producer:
            await producer.publish_many([to_reply, to_scored, to_foreign])
        replies = await read_at_least(kafka, reply, 1)
        letters = [decode(v, DeadLetter) for v in await read_at_least(kafka, kafka.topics.dlq, 2)]
    assert [decode(v, RewardEvent).sample_id for v in replies] == [to_reply.sample_id]
    assert {letter.key for letter in letters} == {
        to_scored.sample_id.encode(),
        to_foreign.sample_id.encode(),
    }
    assert all("is not a reply topic" in letter.reason for letter in letters)


async def test_a_reward_the_topic_refuses_is_dead_lettered_and_the_partition_moves_on(
    kafka: KafkaSettings,
) -> None:
    """A non-retriable produce error (record too large) used to be retried for ever."""
    rewards = table_spec(kafka.topics, "rewards", partitions=1)
    small = replace(rewards, config={**rewards.config, "max.message.bytes": "4096"})
    admin = AioClients(kafka).admin()
    async with kafkaio.running(admin):  # a rewards topic that takes only small records
        await ensure_topic(admin, small, timeout_s=30)
    await ensure_topics(kafka, partitions=1)
    many = IoSuite(inputs=[f"{i} 1\n" for i in range(300)], outputs=["0\n"] * 300)
    big = Completion(sample_id="big", batch_id="b10", code=ADD, tests=many)
    small = _completions("b10", 1, code=lambda i: ADD)[0]
    async with running(worker(kafka, "w1")):
        async with RolloutProducer(kafka) as producer:
            await producer.publish_many([big, small])
        rewards = await read_at_least(kafka, kafka.topics.rewards, 1)
        (letter,) = [decode(v, DeadLetter) for v in await read_at_least(kafka, kafka.topics.dlq, 1)]
    assert [decode(v, RewardEvent).sample_id for v in rewards] == [small.sample_id]
    assert letter.key == b"big" and letter.stage == "emit"
    assert "RecordTooLarge" in letter.reason or "MessageSizeTooLarge" in letter.reason


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_worker_stopped_mid_batch_loses_nothing(
    kafka: KafkaSettings, stop_signal: signal.Signals
) -> None:
    await ensure_topics(kafka, partitions=4)
    work = _completions("b3", 30, code=lambda i: f"# {i}\n" + SLOW_ADD)
    group = group_of(kafka, "stop-workers")
    argv = [
        sys.executable, "-m", "rewardbus", "worker",
        "--bootstrap-servers", kafka.bootstrap_servers,
        "--topic-prefix", kafka.topics.prefix,
        "--group-id", group,
    ]  # fmt: skip
    procs = [
        await asyncio.create_subprocess_exec(
            *argv, "--worker-id", f"p{i}", stdout=asyncio.subprocess.PIPE
        )
        for i in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
            assert b"ready" in line
        await await_group_members(kafka, group, 2, timeout_s=60)
        async with (
            running(aggregator(kafka)),
            ScoredBatches(kafka, group_id=group_of(kafka, "learner")) as learner,
        ):
            async with RolloutProducer(kafka) as producer:
                await producer.publish_manifest(_manifest("b3", work))
                await producer.publish_many(work)
            seen: list[bytes] = await read_at_least(kafka, kafka.topics.rewards, 5)
            assert len(seen) >= 5
            procs[0].send_signal(stop_signal)
            status = await asyncio.wait_for(procs[0].wait(), timeout=60)
            assert status == (0 if stop_signal == signal.SIGTERM else -signal.SIGKILL)
            batch = await learner.get("b3", timeout=120)
        assert batch.complete and batch.missing == []
        assert [s.sample_id for s in batch.samples] == [c.sample_id for c in work]
        assert all(s.score == 1.0 for s in batch.samples)
        rewards = [
            decode(v, RewardEvent) for v in await read_at_least(kafka, kafka.topics.rewards, 30)
        ]
        counts = Counter(r.sample_id for r in rewards)
        assert set(counts) == {c.sample_id for c in work}
        assert {r.worker_id for r in rewards} == {"p0", "p1"}
        if stop_signal == signal.SIGTERM:
            # Drained, committed and left: nothing was judged twice.
            assert max(counts.values()) == 1
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), timeout=60)


async def test_one_sample_trace_spans_producer_worker_and_aggregator(
    kafka: KafkaSettings, span_exporter: object
) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    assert isinstance(span_exporter, InMemorySpanExporter)
    await ensure_topics(kafka, partitions=4)
    one = _completions("b4", 1, code=lambda i: ADD)
    async with (
        running(aggregator(kafka)),
        running(worker(kafka, "w1")),
        ScoredBatches(kafka, group_id=group_of(kafka, "learner")) as learner,
    ):
        async with RolloutProducer(kafka) as producer:
            await producer.publish_manifest(_manifest("b4", one))
            await producer.publish_many(one)
        await learner.get("b4", timeout=60)
    spans = span_exporter.get_finished_spans()
    publish = next(
        s for s in spans
        if s.name == "publish completion"
        and s.attributes.get("rewardbus.sample_id") == one[0].sample_id
    )  # fmt: skip
    trace_id = publish.context.trace_id
    in_trace = {s.name for s in spans if s.context.trace_id == trace_id}
    assert {"publish completion", "judge completion", "queue wait", "emit reward"} <= in_trace
    assert any(name.startswith("aggregate") for name in in_trace), in_trace
    # The batch span is its own trace and links back to the sample.
    emit = [s for s in spans if s.name == "emit scored batch"]
    assert any(link.context.trace_id == trace_id for s in emit for link in s.links)


async def test_multi_program_completion_against_a_shared_problem(kafka: KafkaSettings) -> None:
    from schemas import ProblemRecord, program_sample_id, suite_digest

    await ensure_topics(kafka, partitions=4)
    suite = IoSuite(inputs=["2 3\n", "1 1\n"], outputs=["5\n", "2\n"])
    digest = suite_digest(suite)
    packed = Completion(
        sample_id="b5-s0",
        batch_id="b5",
        group_id="b5-g0",
        programs=[ADD, SUB, ADD],
        problem_id="sum-two",
        tests_digest=digest,
    )
    ids = [program_sample_id(packed.sample_id, i) for i in range(3)]
    manifest = BatchManifest(
        batch_id="b5", sample_ids=ids, group_ids=["b5-g0"] * 3, deadline=time.time() + 120
    )
    async with (
        running(aggregator(kafka)),
        running(worker(kafka, "w1")),
        ScoredBatches(kafka, group_id=group_of(kafka, "learner")) as learner,
    ):
        async with RolloutProducer(kafka) as producer:
            await producer.publish_problem(
                ProblemRecord(problem_id="sum-two", digest=digest, tests=suite)
            )
            await producer.publish_manifest(manifest)
            await producer.publish(packed)
        batch = await learner.get("b5", timeout=90)
    assert batch.complete
    assert [s.sample_id for s in batch.samples] == ids
    assert [s.score for s in batch.samples] == [1.0, 0.0, 1.0]
    rewards = [decode(v, RewardEvent) for v in await read_at_least(kafka, kafka.topics.rewards, 3)]
    assert sorted(r.program_index for r in rewards) == [0, 1, 2]
    # Program 2 is program 0 again: judged once, served from the result cache.
    assert sum(r.cache_hit for r in rewards) >= 1


async def test_digest_mismatch_is_a_dead_letter_not_a_wrong_verdict(kafka: KafkaSettings) -> None:
    from schemas import ProblemRecord, suite_digest

    await ensure_topics(kafka, partitions=4)
    suite = IoSuite(inputs=["2 3\n"], outputs=["5\n"])
    stale = Completion(
        sample_id="b6-s0",
        batch_id="b6",
        code=ADD,
        problem_id="p6",
        tests_digest="sha256:" + "0" * 64,
    )
    async with running(worker(kafka, "w1")):
        async with RolloutProducer(kafka) as producer:
            await producer.publish_problem(
                ProblemRecord(problem_id="p6", digest=suite_digest(suite), tests=suite)
            )
            await producer.publish(stale)
        letters = [decode(v, DeadLetter) for v in await read_at_least(kafka, kafka.topics.dlq, 1)]
    assert letters[0].error_type == "DigestMismatch"
    assert "digest" in letters[0].reason


async def test_work_cancelled_at_the_drain_deadline_is_redone_by_the_other_worker(
    kafka: KafkaSettings,
) -> None:
    await ensure_topics(kafka, partitions=4)
    slow = [
        msgspec.structs.replace(c, code=f"import time\ntime.sleep(1.0)  # {i}\n" + ADD)
        for i, c in enumerate(_completions("b7", 8, code=lambda i: ADD))
    ]
    quitter_stats, stayer_stats = WorkerStats(), WorkerStats()
    async with (
        running(aggregator(kafka)),
        running(worker(kafka, "stayer", stats=stayer_stats)),
        ScoredBatches(kafka, group_id=group_of(kafka, "learner")) as learner,
    ):
        # The quitter gives in-flight work 50 ms to finish when told to stop.
        async with running(worker(kafka, "quitter", stats=quitter_stats, drain_timeout_s=0.05)):
            await await_group_members(kafka, group_of(kafka, "workers"), 2, timeout_s=60)
            async with RolloutProducer(kafka) as producer:
                await producer.publish_manifest(_manifest("b7", slow))
                await producer.publish_many(slow)
            # Stop it while it is busy.
            await until(lambda: quitter_stats.consumed > 0, "the quitter to get work", timeout_s=60)
        batch = await learner.get("b7", timeout=120)
    assert batch.complete and batch.missing == []
    assert all(s.score == 1.0 for s in batch.samples)
    # What the quitter abandoned was redone by the stayer, not committed and lost.
    assert quitter_stats.rewarded < quitter_stats.consumed
    assert stayer_stats.rewarded + quitter_stats.rewarded >= 8


async def test_megabyte_suites_inline_and_shared_and_a_large_dead_letter(
    kafka: KafkaSettings,
) -> None:
    from schemas import ProblemRecord, suite_digest

    await ensure_topics(kafka, partitions=4)
    numbers = [" ".join(str(n) for n in range(i, i + 60_000)) + "\n" for i in range(6)]
    suite = IoSuite(inputs=numbers, outputs=[f"{sum(map(int, x.split()))}\n" for x in numbers])
    assert len(encode(suite)) > 2_000_000  # over Kafka's 1 MiB default
    program = "print(sum(map(int, input().split())))\n"
    inline = Completion(sample_id="b8-inline", batch_id="b8", code=program, tests=suite)
    shared = Completion(
        sample_id="b8-shared",
        batch_id="b8",
        code="# shared\n" + program,
        problem_id="big",
        tests_digest=suite_digest(suite),
    )
    async with (
        running(aggregator(kafka)),
        running(worker(kafka, "w1")),
        ScoredBatches(kafka, group_id=group_of(kafka, "learner")) as learner,
    ):
        async with RolloutProducer(kafka) as producer:
            await producer.publish_problem(
                ProblemRecord(problem_id="big", digest=suite_digest(suite), tests=suite)
            )
            await producer.publish_manifest(_manifest("b8", [inline, shared]))
            await producer.publish_many([inline, shared])
            # A large message that is not a completion: its bytes must reach the DLQ whole.
            junk = b"\xc1" + bytes(3_000_000)
            raw = AioClients(kafka).producer(ProducerOptions(max_request_bytes=16 << 20))
            async with kafkaio.running(raw):
                await raw.send_and_wait(kafka.topics.completions, junk, key=b"big-junk")
        batch = await learner.get("b8", timeout=120)
        letters = [decode(v, DeadLetter) for v in await read_at_least(kafka, kafka.topics.dlq, 1)]
    assert batch.complete
    assert [s.score for s in batch.samples] == [1.0, 1.0]
    assert letters[0].key == b"big-junk" and letters[0].value == junk
