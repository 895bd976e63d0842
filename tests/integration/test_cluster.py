"""A three-broker KRaft cluster under faults: the partition leader is killed -9 mid-run.

Topics have replication factor 3 and min.insync.replicas=2, every producer uses acks=all.
The node leading partitions of both the completions and the rewards topic is SIGKILLed while
completions stream in and rewards stream out, and restarted later; every sample must be in
exactly one scored batch, exactly once, and producer, workers, aggregator and learner ride
through without a restart. The reward gap around the kill is measured and printed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from aiokafka.errors import KafkaError

import kafkaio
from consumers import ScoredBatches
from kafkaio import AioClients, ConsumerOptions, assign_from, topic_partitions
from producers import RolloutProducer
from rewardbus.runtime.cluster import Cluster, ClusterConfig
from rewardbus.topics import await_group_members, ensure_topics
from sandbox_workers.service import WorkerStats
from schemas import BatchManifest, Completion, IoSuite, KafkaSettings, RewardEvent, Topics, decode
from tests.support.broker_state import admin_client, topic_configs
from tests.support.poll import until
from tests.support.stages import aggregator, running, worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
BATCHES, BATCH_SIZE = 8, 25
KILL_AFTER, RESTART_AFTER = 50, 50  # rewards seen before the kill; more seen before the restart
IN_FLIGHT = 24  # published but not yet rewarded: the producer keeps this much work queued


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(ClusterConfig(brokers=3, num_partitions=4)) as running:
        yield running


def _batch(batch_id: str) -> tuple[BatchManifest, list[Completion]]:
    suite = IoSuite(inputs=["2 3\n"], outputs=["5\n"])
    completions = [
        Completion(
            sample_id=f"{batch_id}-s{i:03d}",
            batch_id=batch_id,
            group_id=f"{batch_id}-g{i // 5}",
            code=f"# {batch_id} {i}\n{ADD}",  # distinct programs: the result cache stays out
            tests=suite,
        )
        for i in range(BATCH_SIZE)
    ]
    manifest = BatchManifest(
        batch_id=batch_id,
        sample_ids=[c.sample_id for c in completions],
        group_ids=[c.group_id for c in completions],
        group_size=5,
        deadline=time.time() + 600,
    )
    return manifest, completions


class RewardWatch:
    """Every reward record as it arrives (its own consumer, no group): arrival times."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.arrivals: list[tuple[float, str]] = []
        self._kafka = kafka

    async def run(self, stop: asyncio.Event) -> None:
        clients = AioClients(self._kafka)
        # A group-less consumer's metadata may not list a topic this new yet: ask an admin.
        parts = await topic_partitions(clients, self._kafka.topics.rewards, timeout_s=60)
        consumer = clients.consumer(ConsumerOptions())
        async with kafkaio.running(consumer):
            await assign_from(consumer, parts, from_beginning=True)
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                now = time.monotonic()
                for records in batches.values():
                    for record in records:
                        assert record.value is not None
                        self.arrivals.append((now, decode(record.value, RewardEvent).sample_id))

    async def reached(self, count: int, timeout_s: float = 180) -> None:
        await until(
            lambda: len(self.arrivals) >= count,
            lambda: f"{count} rewards, {len(self.arrivals)} arrived",
            timeout_s=timeout_s,
            every_s=0.05,
        )

    def gap_around(self, at: float) -> tuple[float, float]:
        """(longest stretch without a reward that spans `at`, time from `at` to the next one)."""
        before = max((t for t, _ in self.arrivals if t <= at), default=at)
        after = min((t for t, _ in self.arrivals if t > at), default=float("inf"))
        return after - before, after - at


async def _leaders(kafka: KafkaSettings, topics: list[str]) -> dict[str, dict[int, int]]:
    # aiokafka's admin: the seam describes a topic's size, not who leads it (only this test asks).
    async with admin_client(kafka) as admin:
        described = await admin.describe_topics(topics)
    return {t["topic"]: {p["partition"]: p["leader"] for p in t["partitions"]} for t in described}


async def _leaders_without(
    kafka: KafkaSettings, topics: list[str], node: int, timeout_s: float = 120
) -> dict[str, dict[int, int]]:
    """Poll until no partition of `topics` names `node` as its leader (it was killed)."""
    leaders: dict[str, dict[int, int]] = {}

    async def moved() -> bool:
        leaders.update(await _leaders(kafka, topics))
        return all(node not in parts.values() for parts in leaders.values())

    # The admin may try the dead node first.
    await until(
        moved,
        f"node {node} to lead no partition",
        timeout_s=timeout_s,
        every_s=0.2,
        ignoring=(KafkaError,),
    )
    return leaders


async def _min_isr(kafka: KafkaSettings, topics: list[str]) -> dict[str, str]:
    """Each topic's min.insync.replicas."""
    configs = await topic_configs(kafka, topics)
    return {name: config["min.insync.replicas"] for name, config in configs.items()}


def _victim(leaders: dict[str, dict[int, int]]) -> int:
    """The node leading the most partitions among those that lead some of every topic."""
    led = Counter(node for parts in leaders.values() for node in parts.values())
    both = set.intersection(*(set(parts.values()) for parts in leaders.values()))
    assert both, f"no node leads a partition of every topic: {leaders}"
    return max(both, key=lambda node: led[node])


async def _publish(
    kafka: KafkaSettings, watch: RewardWatch, batches: list[tuple[BatchManifest, list[Completion]]]
) -> float:
    """Publish every batch, keeping IN_FLIGHT samples queued; the slowest publish call (s)."""
    slowest, published = 0.0, 0
    async with RolloutProducer(kafka) as producer:
        for manifest, completions in batches:
            await producer.publish_manifest(manifest)
            for completion in completions:
                await watch.reached(published - IN_FLIGHT)
                started = time.monotonic()
                await producer.publish(completion)
                slowest = max(slowest, time.monotonic() - started)
                published += 1
    return slowest


# Three JVMs start (~25 s on 2 busy cores), two failovers, 200 sandboxed executions.
@pytest.mark.timeout(480)
async def test_leader_kill_and_restart_lose_and_duplicate_nothing(cluster: Cluster) -> None:
    topics = Topics(prefix=f"c{time.time_ns():x}.")
    kafka = KafkaSettings(bootstrap_servers=cluster.bootstrap_servers, topics=topics)
    await ensure_topics(kafka, partitions=4, replication_factor=3, min_insync_replicas=2)
    assert set((await _min_isr(kafka, [topics.completions, topics.rewards])).values()) == {"2"}
    leaders = await _leaders(kafka, [topics.completions, topics.rewards])
    victim = _victim(leaders)
    batches = [_batch(f"k{b}") for b in range(BATCHES)]
    total = BATCHES * BATCH_SIZE
    stats = [WorkerStats(), WorkerStats()]
    watch, stop_watch = RewardWatch(kafka), asyncio.Event()
    watcher = asyncio.ensure_future(watch.run(stop_watch))
    async with (
        running(aggregator(kafka), ready_s=120),
        running(worker(kafka, "w1", stats=stats[0]), ready_s=120),
        running(worker(kafka, "w2", stats=stats[1]), ready_s=120),
        ScoredBatches(kafka, group_id=f"{topics.prefix}learner") as learner,
    ):
        await await_group_members(kafka, f"{topics.prefix}workers", 2, timeout_s=120)
        publisher = asyncio.ensure_future(_publish(kafka, watch, batches))
        await watch.reached(KILL_AFTER)
        killed_at = time.monotonic()
        await asyncio.to_thread(cluster.kill, victim)
        seen_at_kill = len(watch.arrivals)
        moved = await _leaders_without(kafka, [topics.completions, topics.rewards], victim)
        new_leaders_after = time.monotonic() - killed_at
        await watch.reached(seen_at_kill + RESTART_AFTER)
        restart_began = time.monotonic()
        await asyncio.to_thread(cluster.restart, victim)
        restarted_at = time.monotonic()
        slowest_publish = await asyncio.wait_for(publisher, timeout=300)
        scored = [await learner.get(m.batch_id, timeout=300) for m, _ in batches]
    stop_watch.set()
    await watcher

    # Nothing lost, nothing twice: each batch complete, in manifest order, each sample once.
    for (manifest, _), batch in zip(batches, scored, strict=True):
        assert batch.complete and batch.missing == [], batch.batch_id
        assert [s.sample_id for s in batch.samples] == manifest.sample_ids
        assert all(s.score == 1.0 for s in batch.samples)
    every = Counter(s.sample_id for batch in scored for s in batch.samples)
    assert len(every) == total and set(every.values()) == {1}
    # The victim led partitions of both topics (chosen so), and they moved while it was down.
    assert all(moved[t] != leaders[t] for t in leaders), (leaders, moved)
    assert stats[0].rewarded > 0 and stats[1].rewarded > 0

    gap, to_next = watch.gap_around(killed_at)
    restart_gap, _ = watch.gap_around(restart_began)
    rewards = Counter(sample for _, sample in watch.arrivals)
    figures = {
        "victim": victim,
        "led_partitions": {t: sorted(p for p, n in parts.items() if n == victim)
                           for t, parts in leaders.items()},
        "new_leaders_after_s": round(new_leaders_after, 2),
        "no_reward_gap_around_kill_s": round(gap, 2),
        "kill_to_next_reward_s": round(to_next, 2),
        "no_reward_gap_around_restart_s": round(restart_gap, 2),
        "restart_s": round(restarted_at - restart_began, 2),
        "slowest_publish_s": round(slowest_publish, 2),
        "rewards_produced": len(watch.arrivals),
        "samples_judged_twice": sum(1 for c in rewards.values() if c > 1),
        "samples": total,
    }  # fmt: skip
    print("cluster failover:", json.dumps(figures))
    assert set(rewards) == set(every)
