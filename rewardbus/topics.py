"""Topic creation from the one topic table (``schemas.TOPIC_TABLE``), and group waits."""

from __future__ import annotations

import kafkaio
from kafkaio import AioClients, Clients, running, table_specs
from schemas import KafkaSettings, Replication

__all__ = ["await_group_members", "ensure_topics"]

# A topic just created takes a moment to appear in every broker's metadata.
_CREATION_WAIT_S = 30.0


async def ensure_topics(
    kafka: KafkaSettings,
    *,
    partitions: int = 4,
    replication_factor: int = 1,
    min_insync_replicas: int | None = None,
    clients: Clients | None = None,
) -> None:
    """Create every rewardbus topic that does not exist yet, as the topic table says.

    ``partitions`` is the deployment's count (the DLQ has one partition; rewards,
    manifests, scored batches and the aggregator's state are co-partitioned).
    ``min_insync_replicas`` (None: the broker's default) is set on every topic: with
    replication factor 3 and 2, an acks=all write survives one broker down and is
    never acknowledged by one alone. Existing topics are left as they are.
    """
    replication = Replication(replication_factor, min_insync_replicas)
    specs = table_specs(kafka.topics, partitions=partitions, replication=replication)
    admin = (clients or AioClients(kafka)).admin()
    async with running(admin):
        await kafkaio.ensure_topics(admin, specs, timeout_s=_CREATION_WAIT_S)


async def await_group_members(
    kafka: KafkaSettings, group_id: str, members: int, *, timeout_s: float = 60.0
) -> None:
    """Wait until consumer group ``group_id`` is stable with at least ``members`` members."""
    admin = AioClients(kafka).admin()
    async with running(admin):
        await kafkaio.wait_for_group(admin, group_id, members, timeout_s=timeout_s)
