"""The aggregator on the real broker: dedup, deadlines, DLQ, crashes, rebalances, traces."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Sequence

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import kafkaio
from consumers import ScoredBatches, grpo_advantages
from kafkaio import AioClients, ProducerOptions, ensure_topics, table_spec
from schemas import (
    BatchManifest,
    DeadLetter,
    KafkaSettings,
    RewardEvent,
    SampleRecord,
    ScoredBatch,
    TopicRole,
    Verdict,
    decode,
    decode_state,
    encode,
    header,
    inject_context,
)
from tests.support.broker_state import committed_offsets
from tests.support.poll import until
from tests.support.reading import read_topic, read_until
from tests.support.stages import aggregator, group_of, running

pytestmark = pytest.mark.integration

PARTITIONS = 4


# -- helpers -------------------------------------------------------------------------------


async def create_topics(kafka: KafkaSettings) -> None:
    """Manifests, rewards and scored co-partitioned; the aggregator creates its state topic."""
    roles: list[TopicRole] = ["manifests", "rewards", "scored", "dlq"]
    admin = AioClients(kafka).admin()
    async with kafkaio.running(admin):
        specs = [table_spec(kafka.topics, role, partitions=PARTITIONS) for role in roles]
        await ensure_topics(admin, specs, timeout_s=30)


def make_manifest(
    batch_id: str, n: int, *, group_size: int = 4, deadline_s: float = 120
) -> BatchManifest:
    return BatchManifest(
        batch_id=batch_id,
        sample_ids=[f"{batch_id}-s{i}" for i in range(n)],
        group_ids=[f"{batch_id}-g{i // group_size}" for i in range(n)],
        group_size=group_size,
        deadline=time.time() + deadline_s,
    )


def make_reward(m: BatchManifest, i: int) -> RewardEvent:
    score = [1.0, 0.0, 0.5, 1.0, 0.25][i % 5]
    return RewardEvent(
        sample_id=m.sample_ids[i],
        batch_id=m.batch_id,
        group_id=m.group_ids[i],
        score=score,
        verdict=Verdict.ACCEPTED if score == 1.0 else Verdict.WRONG_ANSWER,
        passed=int(score * 4),
        total=4,
    )


async def produce(
    kafka: KafkaSettings,
    topic: str,
    items: Sequence[BatchManifest | RewardEvent | bytes],
    *,
    key: str | None = None,
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    # Not idempotent, so no producer-id round trip at each start (a test's deadline runs).
    producer = AioClients(kafka).producer(ProducerOptions(idempotent=False))
    async with kafkaio.running(producer):
        for item in items:
            value = item if isinstance(item, bytes) else encode(item)
            batch_key = key if isinstance(item, bytes) else item.batch_id
            await producer.send_and_wait(
                topic, value, key=(batch_key or "").encode(), headers=headers or []
            )


async def committed_rewards(kafka: KafkaSettings) -> int:
    """How many reward records the aggregator's group has committed, over all partitions."""
    offsets = await committed_offsets(kafka, group_of(kafka, "agg"))
    return sum(offset for tp, offset in offsets.items() if tp.topic == kafka.topics.rewards)


async def settled(kafka: KafkaSettings, samples: set[str], produced: int) -> bool:
    """The samples are persisted and all ``produced`` rewards committed: a crash now
    redelivers nothing, so the duplicates seen afterwards are exactly those we send."""
    return samples <= await held_samples(kafka) and await committed_rewards(kafka) >= produced


async def held_samples(kafka: KafkaSettings) -> set[str]:
    """Sample ids the aggregator has persisted in its state topic (ever)."""
    records = [decode_state(v) for v in await read_topic(kafka, kafka.topics.aggregator_state)]
    return {r.sample_id for r in records if isinstance(r, SampleRecord)}


async def crash(task: asyncio.Task[None]) -> None:
    """Stop the aggregator without its graceful shutdown (no final commit)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def check_scores(batch: ScoredBatch, m: BatchManifest) -> None:
    expected = {m.sample_ids[i]: make_reward(m, i).score for i in range(len(m.sample_ids))}
    present = [s for s in batch.samples if s.present]
    assert {s.sample_id: s.score for s in present} == {
        s.sample_id: expected[s.sample_id] for s in present
    }
    advantages, stats = grpo_advantages([s.score for s in present], [s.group_id for s in present])
    assert [s.advantage for s in present] == pytest.approx(advantages)
    assert batch.groups == stats


# -- tests -----------------------------------------------------------------------------------


async def test_duplicates_and_early_rewards_are_aggregated_once(kafka: KafkaSettings) -> None:
    await create_topics(kafka)
    m = make_manifest("b1", 8)
    rewards = [make_reward(m, i) for i in range(8)]
    async with running(aggregator(kafka)), ScoredBatches(kafka) as learner:
        # Rewards first (held until the manifest comes), each delivered twice.
        await produce(kafka, kafka.topics.rewards, rewards[:5] + rewards[:5])
        await produce(kafka, kafka.topics.manifests, [m])
        await produce(kafka, kafka.topics.rewards, rewards[5:] + rewards[5:])
        batch = await learner.get("b1", timeout=60)
    assert batch.complete and batch.missing == []
    assert [s.sample_id for s in batch.samples] == m.sample_ids
    check_scores(batch, m)
    assert batch.duplicates_ignored >= 5  # the rest may land after emission: ignored as late
    assert len(await read_topic(kafka, kafka.topics.scored)) == 1


async def test_a_batch_past_its_deadline_lists_what_is_missing(kafka: KafkaSettings) -> None:
    await create_topics(kafka)
    async with running(aggregator(kafka)), ScoredBatches(kafka) as learner:
        # The deadline runs from here, once the aggregator is up: the three rewards
        # must be in before it, on a loaded machine too.
        m = make_manifest("late", 5, deadline_s=5)
        await produce(kafka, kafka.topics.manifests, [m])
        await produce(kafka, kafka.topics.rewards, [make_reward(m, i) for i in (0, 2, 3)])
        batch = await learner.get("late", timeout=60)
    assert not batch.complete
    assert batch.missing == [m.sample_ids[1], m.sample_ids[4]]
    assert [s.present for s in batch.samples] == [True, False, True, True, False]
    assert all(s.verdict is None and s.score == 0.0 for s in batch.samples if not s.present)
    check_scores(batch, m)


async def test_garbage_goes_to_the_dlq_and_aggregation_continues(kafka: KafkaSettings) -> None:
    await create_topics(kafka)
    m = make_manifest("ok", 3)
    nameless = RewardEvent(sample_id="x", batch_id="", verdict=Verdict.ACCEPTED)
    async with running(aggregator(kafka)), ScoredBatches(kafka) as learner:
        await produce(kafka, kafka.topics.rewards, [b"\xc1\x00garbage"], key="ok")
        await produce(kafka, kafka.topics.manifests, [b'{"not": "msgpack"}'], key="ok")
        await produce(kafka, kafka.topics.rewards, [encode(nameless)], key="ok")
        await produce(kafka, kafka.topics.manifests, [m])
        await produce(kafka, kafka.topics.rewards, [make_reward(m, i) for i in range(3)])
        batch = await learner.get("ok", timeout=60)
    assert batch.complete
    letters = [decode(v, DeadLetter) for v in await read_topic(kafka, kafka.topics.dlq)]
    by_value = {letter.value: letter for letter in letters}
    assert len(letters) == 3
    garbage = by_value[b"\xc1\x00garbage"]
    assert garbage.stage == "decode" and "RewardEvent" in garbage.reason
    assert garbage.source_topic == kafka.topics.rewards and garbage.key == b"ok"
    assert by_value[b'{"not": "msgpack"}'].stage == "decode"
    assert by_value[encode(nameless)].stage == "validate"
    assert all(letter.service == "aggregator" for letter in letters)


async def test_a_crash_mid_batch_loses_nothing_and_counts_each_sample_once(
    kafka: KafkaSettings,
) -> None:
    await create_topics(kafka)
    m = make_manifest("crash", 10)
    rewards = [make_reward(m, i) for i in range(10)]
    first_half = {r.sample_id for r in rewards[:5]}
    async with ScoredBatches(kafka) as learner:
        async with running(aggregator(kafka)) as task:
            await produce(kafka, kafka.topics.manifests, [m])
            await produce(kafka, kafka.topics.rewards, rewards[:5])

            async def persisted() -> bool:
                return await settled(kafka, first_half, 5)

            await until(
                persisted, "the first half to be persisted and committed", timeout_s=60, every_s=0.1
            )
            await crash(task)
        # The first half again (as a redelivery would bring it), then the rest.
        await produce(kafka, kafka.topics.rewards, rewards[:5] + rewards[5:])
        async with running(aggregator(kafka)):
            batch = await learner.get("crash", timeout=60)
    assert batch.complete and batch.missing == []
    assert [s.sample_id for s in batch.samples] == m.sample_ids
    check_scores(batch, m)
    assert batch.duplicates_ignored == 5
    scored = [decode(v, ScoredBatch) for v in await read_topic(kafka, kafka.topics.scored)]
    assert [b.batch_id for b in scored] == ["crash"]


_KILLABLE = """
import asyncio, sys
from consumers import AggregatorConfig, run_aggregator
from schemas import KafkaSettings, Topics

async def main() -> None:
    kafka = KafkaSettings(bootstrap_servers=sys.argv[1], topics=Topics(prefix=sys.argv[2]))
    ready = asyncio.Event()
    config = AggregatorConfig(group_id=sys.argv[2] + "agg", group_instance_id="agg-0")
    task = asyncio.create_task(
        run_aggregator(kafka, config, shutdown=asyncio.Future(), ready=ready)
    )
    await ready.wait()
    print("ready", flush=True)
    await task

asyncio.run(main())
"""


async def test_kill_9_mid_batch_then_restart_emits_the_batch_once(kafka: KafkaSettings) -> None:
    await create_topics(kafka)
    m = make_manifest("k9", 12)
    rewards = [make_reward(m, i) for i in range(12)]
    argv = [sys.executable, "-c", _KILLABLE, kafka.bootstrap_servers, kafka.topics.prefix]

    async def start() -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        assert b"ready" in await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        return proc

    proc = await start()
    try:
        await produce(kafka, kafka.topics.manifests, [m])
        await produce(kafka, kafka.topics.rewards, rewards[:6])
        wanted = {r.sample_id for r in rewards[:6]}

        async def persisted() -> bool:
            return await settled(kafka, wanted, 6)

        await until(
            persisted, "the first half to be persisted and committed", timeout_s=60, every_s=0.1
        )
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL
        await produce(kafka, kafka.topics.rewards, rewards)  # all again: half are duplicates
        # Static membership: the restarted instance takes the partitions back at once.
        proc = await start()
        async with ScoredBatches(kafka) as learner:
            batch = await learner.get("k9", timeout=60)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
    assert batch.complete and [s.sample_id for s in batch.samples] == m.sample_ids
    check_scores(batch, m)
    assert batch.duplicates_ignored == 6


async def test_two_instances_share_the_partitions_and_see_whole_batches(
    kafka: KafkaSettings,
) -> None:
    await create_topics(kafka)
    manifests = [make_manifest(f"r{i}", 4, deadline_s=300) for i in range(12)]
    async with (
        running(aggregator(kafka)),
        running(aggregator(kafka)),
        ScoredBatches(kafka) as learner,
    ):
        await produce(kafka, kafka.topics.manifests, manifests)
        await produce(
            kafka, kafka.topics.rewards, [make_reward(m, i) for m in manifests for i in range(4)]
        )
        batches = [await learner.get(m.batch_id, timeout=60) for m in manifests]
    # Complete long before the deadline: manifest and rewards of a batch met in one instance.
    assert all(b.complete for b in batches)
    assert len(await read_topic(kafka, kafka.topics.scored)) == len(manifests)


async def test_the_client_hands_out_each_batch_once(kafka: KafkaSettings) -> None:
    await create_topics(kafka)
    a = ScoredBatch(batch_id="a", samples=[])
    b = ScoredBatch(batch_id="b", samples=[])
    producer = AioClients(kafka).producer(ProducerOptions())
    async with kafkaio.running(producer):
        for batch in (a, a, b, a, b):  # re-emissions after aggregator restarts
            await producer.send_and_wait(kafka.topics.scored, encode(batch), partition=0)
        await producer.send_and_wait(kafka.topics.scored, b"\xc1junk", partition=0)
    async with ScoredBatches(kafka, group_id=f"{kafka.topics.prefix}learner") as learner:
        assert (await learner.get("b", timeout=30)).batch_id == "b"  # buffers "a"
        seen = []
        async for batch in learner:
            seen.append(batch.batch_id)
            break
        assert seen == ["a"]
        with pytest.raises(TimeoutError):
            await learner.get("a", timeout=1)


async def test_next_hands_out_batches_in_arrival_order_and_survives_a_timeout(
    kafka: KafkaSettings,
) -> None:
    await create_topics(kafka)
    async with ScoredBatches(kafka) as learner:
        with pytest.raises(TimeoutError, match="no scored batch arrived"):
            await learner.next(timeout=0.5)
        producer = AioClients(kafka).producer(ProducerOptions())
        async with kafkaio.running(producer):
            for batch_id in ("early", "late", "early"):
                batch = ScoredBatch(batch_id=batch_id, samples=[])
                await producer.send_and_wait(kafka.topics.scored, encode(batch), partition=1)
        # After the timeout the client still works; the re-emission is not handed out.
        got = [(await learner.next(timeout=30)).batch_id for _ in range(2)]
        assert got == ["early", "late"]
        with pytest.raises(TimeoutError):
            await learner.next(timeout=1)


async def test_a_sample_trace_reaches_the_aggregator_and_the_batch_links_to_it(
    kafka: KafkaSettings, span_exporter: InMemorySpanExporter
) -> None:
    await create_topics(kafka)
    m = make_manifest("traced", 2)
    tracer = trace.get_tracer("test")
    async with running(aggregator(kafka)), ScoredBatches(kafka) as learner:
        await produce(kafka, kafka.topics.manifests, [m])
        with tracer.start_as_current_span("emit reward") as upstream:
            headers = inject_context()
        await produce(kafka, kafka.topics.rewards, [make_reward(m, 0)], headers=headers)
        await produce(kafka, kafka.topics.rewards, [make_reward(m, 1)])
        await learner.get("traced", timeout=60)
    spans = span_exporter.get_finished_spans()
    aggregate = next(
        s
        for s in spans
        if s.name == "aggregate"
        and s.attributes
        and s.attributes["rewardbus.sample_id"] == m.sample_ids[0]
    )
    assert aggregate.parent is not None
    assert aggregate.parent.span_id == upstream.get_span_context().span_id
    assert aggregate.context.trace_id == upstream.get_span_context().trace_id
    attributes = dict(aggregate.attributes or {})
    assert attributes["messaging.system"] == "kafka"
    assert attributes["messaging.destination.name"] == kafka.topics.rewards
    assert attributes["messaging.consumer.group.name"] == group_of(kafka, "agg")
    assert attributes["rewardbus.batch_id"] == "traced"
    assert {"messaging.kafka.partition", "messaging.kafka.offset"} <= attributes.keys()
    (emit,) = [s for s in spans if s.name == "emit scored batch"]
    linked = {link.context.span_id for link in emit.links}
    assert aggregate.context.span_id in linked and len(linked) == 2
    # The scored record carries the emission span's context.
    record = (await read_until(kafka, [kafka.topics.scored], bool, what="a scored batch"))[0]
    traceparent = header(record.headers, "traceparent")
    assert traceparent is not None
    assert f"{emit.context.trace_id:032x}-{emit.context.span_id:016x}" in traceparent.decode()
