"""Consumer-group scaling and failover with worker containers (testcontainers).

- One worker container scores a batch; two more join mid-batch: every sample is in
  the ScoredBatch exactly once and the work spreads over all three. The rebalance
  time (join started -> group stable with three members owning every partition) is
  measured and printed (``-s``).
- A worker container is killed (``docker kill``) mid-batch: nothing is lost, nothing
  is scored twice in the ScoredBatch; the failover time is measured.

The aggregator runs in this process (its image is exercised by the compose file);
the broker and every worker are containers built by ``make images``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from testcontainers.core.container import DockerContainer

from consumers import ScoredBatches
from producers import RolloutProducer
from schemas import BatchManifest, Completion, IoSuite, KafkaSettings, ScoredBatch
from tests.containers.harness import (
    RewardLog,
    report,
    start_worker,
    wait_group,
    worker_container,
)
from tests.support import stages

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

SLOW_ADD = "import time\ntime.sleep({pause})\na, b = map(int, input().split())\nprint(a + b)\n"


def _batch(batch_id: str, size: int, pause: float) -> tuple[BatchManifest, list[Completion]]:
    work = [
        Completion(
            sample_id=f"{batch_id}-s{i}",
            batch_id=batch_id,
            group_id=f"{batch_id}-g{i % 4}",
            # Distinct code per sample: no cache may answer for the sandbox.
            code=f"# {batch_id} {i}\n" + SLOW_ADD.format(pause=pause),
            tests=IoSuite(inputs=["2 3\n"], outputs=["5\n"]),
        )
        for i in range(size)
    ]
    manifest = BatchManifest(
        batch_id=batch_id,
        sample_ids=[c.sample_id for c in work],
        group_ids=[c.group_id for c in work],
        group_size=4,
        deadline=time.time() + 900,
    )
    return manifest, work


async def _publish(kafka: KafkaSettings, manifest: BatchManifest, work: list[Completion]) -> None:
    async with RolloutProducer(kafka) as producer:
        await producer.publish_manifest(manifest)
        await producer.publish_many(work)


async def _scored(kafka: KafkaSettings, batch_id: str, timeout_s: float) -> ScoredBatch:
    async with ScoredBatches(kafka) as learner, asyncio.timeout(timeout_s):
        while True:
            batch = await learner.next()
            if batch.batch_id == batch_id and batch.complete:
                return batch


@contextlib.asynccontextmanager
async def _containers() -> AsyncIterator[list[DockerContainer]]:
    started: list[DockerContainer] = []
    try:
        yield started
    finally:
        for container in started:
            with contextlib.suppress(Exception):  # already killed or gone: nothing to stop
                await asyncio.to_thread(container.stop)


def _assert_once(batch: ScoredBatch, manifest: BatchManifest) -> None:
    """Zero lost, zero doubled: the whole manifest, in order, each sample once, all passed."""
    ids = [s.sample_id for s in batch.samples]
    assert ids == manifest.sample_ids
    assert len(set(ids)) == len(ids)
    assert batch.missing == []
    assert all(s.score == 1.0 for s in batch.samples), [s.verdict for s in batch.samples]


async def test_workers_join_mid_batch(ckafka: KafkaSettings, reward_log: RewardLog) -> None:
    group = f"{ckafka.topics.prefix}workers"
    # ~70 s of work for one worker: it outlasts two container starts on a loaded 2-core host.
    manifest, work = _batch("join", size=48, pause=1.5)
    async with stages.running(stages.aggregator(ckafka)), _containers() as running:
        first = worker_container(ckafka, "w1")
        running.append(first)
        first_start_s = await start_worker(first)
        await wait_group(ckafka, group, 1, timeout_s=60)
        await _publish(ckafka, manifest, work)
        await reward_log.wait_for(4, timeout_s=180)
        joined = [worker_container(ckafka, w) for w in ("w2", "w3")]
        running.extend(joined)
        join_t0 = time.monotonic()
        start_s = await asyncio.gather(*(start_worker(c) for c in joined))
        stable_at = await wait_group(ckafka, group, 3, timeout_s=120)
        batch = await _scored(ckafka, manifest.batch_id, timeout_s=600)
    spread = reward_log.by_worker()
    new_rewards = [t for t, e in reward_log.events if e.worker_id in ("w2", "w3")]
    report(
        "containers.join",
        {
            "first_worker_start_s": round(first_start_s, 2),
            "joining_workers_start_s": [round(s, 2) for s in start_s],
            "rebalance_s_after_ready": round(stable_at - join_t0 - max(start_s), 2),
            "join_to_stable_s": round(stable_at - join_t0, 2),
            "join_to_first_new_reward_s": round(min(new_rewards, default=join_t0) - join_t0, 2),
            "samples_by_worker": spread,
            "duplicate_reward_events": reward_log.duplicates(),
        },
    )
    _assert_once(batch, manifest)
    _assert_once(batch, manifest)
    assert set(spread) == {"w1", "w2", "w3"}, spread


async def test_worker_killed_mid_batch(ckafka: KafkaSettings, reward_log: RewardLog) -> None:
    group = f"{ckafka.topics.prefix}workers"
    manifest, work = _batch("kill", size=24, pause=0.5)
    async with stages.running(stages.aggregator(ckafka)), _containers() as running:
        workers = [worker_container(ckafka, w) for w in ("k1", "k2")]
        running.extend(workers)
        await asyncio.gather(*(start_worker(c) for c in workers))
        await wait_group(ckafka, group, 2, timeout_s=120)
        await _publish(ckafka, manifest, work)
        await reward_log.wait_for(6, timeout_s=180)
        victim = workers[1]
        killed_at = time.monotonic()
        await asyncio.to_thread(victim.get_wrapped_container().kill)
        stable_at = await wait_group(ckafka, group, 1, timeout_s=120)
        batch = await _scored(ckafka, manifest.batch_id, timeout_s=600)
    after = sorted(t for t, _ in reward_log.events if t >= killed_at)
    assert after, "the kill came after the batch was scored: not mid-batch"
    gaps = [b - a for a, b in zip([killed_at, *after], after, strict=False)]
    report(
        "containers.kill",
        {
            "kill_to_survivor_owns_all_s": round(stable_at - killed_at, 2),
            "longest_reward_gap_after_kill_s": round(max(gaps, default=0.0), 2),
            "samples_by_worker": reward_log.by_worker(),
            "duplicate_reward_events": reward_log.duplicates(),
        },
    )
    _assert_once(batch, manifest)
