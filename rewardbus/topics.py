"""Topic creation from the one topic table (``schemas.TOPIC_TABLE``), and the waits
for a cluster: its topics, its groups."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import kafkaio
from kafkaio import AioClients, Clients, KafkaIOError, running, table_specs
from schemas import KafkaSettings, Replication

__all__ = ["await_cluster_topics", "await_group_members", "ensure_topics"]

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


async def await_cluster_topics(
    kafka: KafkaSettings,
    names: Sequence[str],
    *,
    timeout_s: float,
    on_wait: Callable[[str], None] | None = None,
    retry_s: float = 1.0,
) -> None:
    """Return once the cluster answers and every topic of ``names`` exists.

    A deployment just brought up (``make compose-up``, ``kubectl apply``) takes seconds
    to start its brokers and create its topics: brokers that refuse connections, and
    topics not there yet, are waited out, up to ``timeout_s``. ``on_wait`` is told the
    reason once, the first time there is something to wait for. After ``timeout_s``
    the last error propagates (a retriable :class:`~kafkaio.KafkaIOError`, or
    :class:`~kafkaio.TopicNotFound` naming the absent topics); one that is not
    retriable propagates at once.
    """
    deadline = time.monotonic() + timeout_s
    told = on_wait is None

    def tell(reason: str) -> None:
        nonlocal told
        if not told and on_wait is not None:
            on_wait(reason)
            told = True

    while True:
        admin = AioClients(kafka).admin()
        try:
            async with running(admin):
                if not told and (
                    absent := set(names) - (await admin.describe_topics(names)).keys()
                ):
                    tell(f"topics not created yet: {sorted(absent)}")
                remaining = max(0.0, deadline - time.monotonic())
                await kafkaio.wait_for_topics(admin, names, timeout_s=remaining, poll_s=retry_s)
        except KafkaIOError as exc:
            if not exc.retriable or time.monotonic() + retry_s > deadline:
                raise
            tell(exc.reason)
        else:
            return
        await asyncio.sleep(retry_s)


async def await_group_members(
    kafka: KafkaSettings, group_id: str, members: int, *, timeout_s: float = 60.0
) -> None:
    """Wait until consumer group ``group_id`` is stable with at least ``members`` members."""
    admin = AioClients(kafka).admin()
    async with running(admin):
        await kafkaio.wait_for_group(admin, group_id, members, timeout_s=timeout_s)
