"""Waiting for topics, and creating one that may not exist yet."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

from kafkaio.errors import TopicNotFound
from kafkaio.lifecycle import running
from kafkaio.options import TopicInfo, TopicSpec
from kafkaio.protocols import Admin, Clients, Consumer
from kafkaio.records import TopicPartition

__all__ = ["assign_at", "assign_from", "ensure_topic", "topic_partitions", "wait_for_topics"]


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


async def ensure_topic(admin: Admin, spec: TopicSpec, *, timeout_s: float) -> TopicInfo:
    """``spec``'s topic as it is in the cluster: created first when it is missing.

    An existing topic is returned as it is (its partition count may differ from
    ``spec``'s: callers that depend on it check).
    """
    found = await admin.describe_topics([spec.name])
    if spec.name not in found:
        await admin.create_topics([spec])
        found = await wait_for_topics(admin, [spec.name], timeout_s=timeout_s)
    return found[spec.name]
