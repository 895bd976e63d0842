"""Topic creation, with rewards, manifests and scored batches co-partitioned."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from schemas import MAX_RECORD_BYTES, KafkaSettings

__all__ = ["await_group_members", "ensure_topics"]

# Completions, problems and the DLQ take records up to schemas.MAX_RECORD_BYTES.
_LARGE = {"max.message.bytes": str(MAX_RECORD_BYTES)}
_COMPACTED = {"cleanup.policy": "compact"}
# The attempts ledger holds one live entry per record in flight: its tombstones
# must go soon (every worker replays the topic), so segments roll and clean often.
_ATTEMPTS = _COMPACTED | {
    "segment.ms": "60000",
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": "60000",
}
# Fingerprints are unbounded (every distinct program adds one), and every worker
# replays the topic at start-up: compaction alone would let it grow forever, so
# entries also expire after a week (docs/result-cache.md).
_RESULT_CACHE = {"cleanup.policy": "compact,delete", "retention.ms": str(7 * 24 * 3600 * 1000)}


async def ensure_topics(
    kafka: KafkaSettings,
    *,
    partitions: int = 4,
    replication_factor: int = 1,
    min_insync_replicas: int | None = None,
) -> None:
    """Create every rewardbus topic that does not exist yet.

    Rewards, manifests and scored batches share one partition count so that one
    aggregator instance sees everything about a batch. The problems topic and the
    aggregator's state topic are compacted (latest value per key); the result
    cache is compacted and its entries expire. ``min_insync_replicas`` (None: the
    broker's default) is set on every topic: with replication factor 3 and 2, an
    acks=all write survives one broker down and is never acknowledged by one alone.
    """
    t = kafka.topics
    isr = {} if min_insync_replicas is None else {"min.insync.replicas": str(min_insync_replicas)}

    def topic(name: str, count: int, configs: dict[str, str] | None = None) -> NewTopic:
        return NewTopic(name, count, replication_factor, topic_configs=(configs or {}) | isr)

    wanted = [
        topic(t.completions, partitions, _LARGE),
        topic(t.rewards, partitions),
        topic(t.manifests, partitions),
        topic(t.scored, partitions),
        topic(t.dlq, 1, _LARGE),
        topic(t.problems, partitions, _COMPACTED | _LARGE),
        topic(t.aggregator_state, partitions, _COMPACTED),
        topic(t.result_cache, partitions, _RESULT_CACHE),
        topic(t.attempts, partitions, _ATTEMPTS),
    ]
    admin = AIOKafkaAdminClient(**kafka.client_kwargs())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [topic for topic in wanted if topic.name not in existing]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):  # another process was first
                await admin.create_topics(missing)
        await _wait_for_metadata(admin, [topic.name for topic in wanted])
    finally:
        await admin.close()


async def _wait_for_metadata(admin: AIOKafkaAdminClient, names: list[str]) -> None:
    for _ in range(100):
        if set(names) <= set(await admin.list_topics()):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"topics not visible after creation: {names}")


async def await_group_members(
    kafka: KafkaSettings, group_id: str, members: int, *, timeout_s: float = 60.0
) -> None:
    """Wait until consumer group ``group_id`` is stable with at least ``members`` members."""
    admin = AIOKafkaAdminClient(**kafka.client_kwargs())
    await admin.start()
    try:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            try:
                described = await admin.describe_consumer_groups([group_id])
            except KafkaError as exc:
                if not exc.retriable:  # e.g. the coordinator is still loading on a new broker
                    raise
            else:
                if _stable_members(described) >= members:
                    return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"fewer than {members} members joined {group_id!r}")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


def _stable_members(described: list[Any]) -> int:
    for response in described:
        for group in response.groups:
            # DescribeGroups: (error_code, group_id, state, protocol_type, protocol, members, ..)
            if group[2] == "Stable":
                return len(group[5])
    return 0
