"""What the broker says about topics and groups, for a test to assert on.

Topic configs, a group's committed offsets and its members' assignments: the
components never ask for these, so the Kafka seam (``kafkaio``) does not offer
them, and these helpers use aiokafka's admin client directly. Here, once, rather
than in each test that checks them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.group import MemberAssignment

from kafkaio import TopicPartition
from schemas import KafkaSettings
from tests.support.poll import until

__all__ = [
    "GroupState",
    "admin_client",
    "committed_offsets",
    "group_state",
    "topic_configs",
    "until_committed",
]


@contextlib.asynccontextmanager
async def admin_client(kafka: KafkaSettings) -> AsyncIterator[AIOKafkaAdminClient]:
    """aiokafka's admin client for ``kafka``, started, closed at the end."""
    admin = AIOKafkaAdminClient(**kafka.client_kwargs())
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def topic_configs(
    kafka: KafkaSettings, names: Sequence[str], *, timeout_s: float = 30
) -> dict[str, dict[str, str]]:
    """Each topic's configs, polled: right after creation a broker can answer
    DescribeConfigs before it has the new topic's configs."""
    found: dict[str, dict[str, str]] = {}
    resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
    async with admin_client(kafka) as admin:

        async def all_found() -> bool:
            for response in await admin.describe_configs(resources):
                for error, _msg, _type, name, entries in response.resources:
                    if error == 0 and entries:
                        found[name] = {key: value for key, value, *_ in entries}
            return set(found) == set(names)

        await until(
            all_found, f"the configs of all of {list(names)}", timeout_s=timeout_s, every_s=0.2
        )
    return found


async def committed_offsets(kafka: KafkaSettings, group_id: str) -> dict[TopicPartition, int]:
    """The offsets ``group_id`` has committed (a partition it never committed is absent)."""
    async with admin_client(kafka) as admin:
        offsets = await admin.list_consumer_group_offsets(group_id)
    return {tp: meta.offset for tp, meta in offsets.items()}


async def until_committed(
    kafka: KafkaSettings,
    group_id: str,
    ends: Mapping[TopicPartition, int],
    *,
    what: str,
    timeout_s: float,
    every_s: float = 0.1,
) -> None:
    """Poll until ``group_id`` has committed at least ``ends`` on each of its partitions."""
    committed: dict[TopicPartition, int] = {}
    async with admin_client(kafka) as admin:

        async def reached() -> bool:
            offsets = await admin.list_consumer_group_offsets(group_id)
            committed.update({tp: offsets[tp].offset if tp in offsets else 0 for tp in ends})
            return all(committed[tp] >= end for tp, end in ends.items())

        await until(
            reached,
            lambda: f"{what}: committed {committed}, ends {dict(ends)}",
            timeout_s=timeout_s,
            every_s=every_s,
        )


@dataclass(frozen=True)
class GroupState:
    """A consumer group as the coordinator describes it."""

    state: str
    owned: dict[str, int]  # member id -> how many partitions it is assigned

    @property
    def partitions(self) -> int:
        """How many partitions the members own between them."""
        return sum(self.owned.values())


async def group_state(admin: AIOKafkaAdminClient, group_id: str) -> GroupState:
    """``group_id``'s state and each member's share of the partitions."""
    (response,) = await admin.describe_consumer_groups([group_id])
    (group,) = response.groups
    state, members = group[2], group[5]
    owned: dict[str, int] = {}
    for member in members:
        assignment = MemberAssignment.decode(member[-1]) if member[-1] else None
        owned[str(member[0])] = (
            sum(len(p) for _topic, p in assignment.assignment) if assignment else 0
        )
    return GroupState(str(state), owned)
