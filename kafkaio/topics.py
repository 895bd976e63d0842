"""Waiting for topics and groups, and creating the topics that may not exist yet (from the
topic table)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

from kafkaio.errors import KafkaIOError, TopicNotFound
from kafkaio.lifecycle import running
from kafkaio.options import TopicInfo, TopicSpec
from kafkaio.protocols import Admin, Clients, Consumer
from kafkaio.records import TopicPartition
from schemas import REPLY_TOPIC, TOPIC_TABLE, Replication, TopicRole, Topics

__all__ = [
    "assign_at",
    "assign_from",
    "ensure_topic",
    "ensure_topics",
    "reply_topic_spec",
    "table_spec",
    "table_specs",
    "topic_partitions",
    "wait_for_group",
    "wait_for_topics",
]


async def wait_for_topics(
    admin: Admin, names: Sequence[str], *, timeout_s: float, poll_s: float = 0.05
) -> dict[str, TopicInfo]:
    """The topics, once every one of them is in the cluster metadata.

    A topic that was just created takes a moment to propagate, and one that a
    subscription names before it exists is noticed only at the next metadata
    refresh (minutes): components wait here instead, bounded. Raises
    :class:`~kafkaio.TopicNotFound` naming the absent ones after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        found = await admin.describe_topics(names)
        absent = [name for name in names if name not in found]
        if not absent:
            return found
        if time.monotonic() >= deadline:
            raise TopicNotFound(
                f"topics do not exist after {timeout_s:g} s: {absent} (create them first)"
            )
        await asyncio.sleep(poll_s)


async def wait_for_group(
    admin: Admin, group_id: str, members: int, *, timeout_s: float, poll_s: float = 0.1
) -> None:
    """Return once consumer group ``group_id`` is stable with at least ``members`` members.

    A retriable error (a coordinator still loading on a new broker) is waited out; raises
    :class:`TimeoutError` after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if await admin.stable_group_members(group_id) >= members:
                return
        except KafkaIOError as exc:
            if not exc.retriable:
                raise
        if time.monotonic() >= deadline:
            raise TimeoutError(f"fewer than {members} members joined {group_id!r}")
        await asyncio.sleep(poll_s)


async def topic_partitions(
    clients: Clients, topic: str, *, timeout_s: float, poll_s: float = 0.05
) -> list[TopicPartition]:
    """Every partition of ``topic``, once it exists (waited for as in :func:`wait_for_topics`).

    For a reader that assigns itself the whole topic instead of joining a group.
    """
    admin = clients.admin()
    async with running(admin):
        found = await wait_for_topics(admin, [topic], timeout_s=timeout_s, poll_s=poll_s)
    return [TopicPartition(topic, p) for p in range(found[topic].partitions)]


async def assign_from(
    consumer: Consumer, partitions: Sequence[TopicPartition], *, from_beginning: bool
) -> None:
    """Read exactly ``partitions``, from their first offset or from their end.

    The positions are resolved before this returns: a reset left to the first fetch
    would skip what is written in between.
    """
    consumer.assign(partitions)
    if from_beginning:
        await consumer.seek_to_beginning(*partitions)
    else:
        await consumer.seek_to_end(*partitions)


async def assign_at(
    consumer: Consumer, partitions: Sequence[TopicPartition], offsets: Mapping[int, int]
) -> None:
    """Read exactly ``partitions``, each from ``offsets[partition]`` (a saved position).

    A partition ``offsets`` does not name (added since the position was saved) is read
    from its first offset.
    """
    consumer.assign(partitions)
    unknown = [tp for tp in partitions if tp.partition not in offsets]
    if unknown:
        await consumer.seek_to_beginning(*unknown)
    for tp in partitions:
        if tp.partition in offsets:
            consumer.seek(tp, offsets[tp.partition])


def table_spec(
    topics: Topics, role: TopicRole, *, partitions: int, replication: Replication | None = None
) -> TopicSpec:
    """``role``'s topic as :data:`schemas.TOPIC_TABLE` says, in a deployment of ``partitions``."""
    settings = TOPIC_TABLE[role]
    replication = replication or Replication()
    return TopicSpec(
        topics.name(role),
        settings.partitions(partitions),
        replication.factor,
        settings.config() | replication.config(),
    )


def table_specs(
    topics: Topics, *, partitions: int, replication: Replication | None = None
) -> list[TopicSpec]:
    """Every topic of the deployment, in creation order, as the table says."""
    return [
        table_spec(topics, role, partitions=partitions, replication=replication)
        for role in TOPIC_TABLE
    ]


def reply_topic_spec(name: str, replication_factor: int) -> TopicSpec:
    """A waiting client's reply topic (``Topics.reply_topic``), as the table says."""
    return TopicSpec(name, REPLY_TOPIC.partitions(1), replication_factor, REPLY_TOPIC.config())


async def ensure_topics(
    admin: Admin, specs: Sequence[TopicSpec], *, timeout_s: float
) -> dict[str, TopicInfo]:
    """The topics as they are in the cluster: those missing created first.

    Idempotent, and safe when another process creates them at the same time. An
    existing topic is returned as it is (neither its partition count nor its configs
    are changed to ``specs``': callers that depend on them check).
    """
    names = [spec.name for spec in specs]
    found = await admin.describe_topics(names)
    missing = [spec for spec in specs if spec.name not in found]
    if missing:
        await admin.create_topics(missing)
        found = await wait_for_topics(admin, names, timeout_s=timeout_s)
    return found


async def ensure_topic(admin: Admin, spec: TopicSpec, *, timeout_s: float) -> TopicInfo:
    """``spec``'s topic as it is in the cluster: created first when it is missing."""
    return (await ensure_topics(admin, [spec], timeout_s=timeout_s))[spec.name]
