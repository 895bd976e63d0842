"""On the broker, every topic has what the topic table says, whoever created it first."""

from __future__ import annotations

import asyncio
import time

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

import kafkaio
from consumers.state_store import prepare_topics
from kafkaio import AioClients, running, table_spec
from rewardbus.topics import ensure_topics
from schemas import TOPIC_TABLE, KafkaSettings, TopicRole


async def _configs(kafka: KafkaSettings, names: list[str]) -> dict[str, dict[str, str]]:
    """Each topic's configs, polled: right after creation a broker can answer
    DescribeConfigs before it has the new topic's configs."""
    admin = AIOKafkaAdminClient(**kafka.client_kwargs())
    await admin.start()
    found: dict[str, dict[str, str]] = {}
    try:
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        deadline = time.monotonic() + 30
        while set(found) != set(names):
            assert time.monotonic() < deadline, f"no configs for all of {names}"
            for response in await admin.describe_configs(resources):
                for error, _msg, _type, name, entries in response.resources:
                    if error == 0 and entries:
                        found[name] = {key: value for key, value, *_ in entries}
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    return found


Differences = dict[str, dict[str, tuple[str, str | None]]]


def _differences(kafka: KafkaSettings, found: dict[str, dict[str, str]]) -> Differences:
    """Per topic, the table's configs the broker does not have (key: (wanted, found))."""
    differences: Differences = {}
    for role, settings in TOPIC_TABLE.items():
        name = kafka.topics.name(role)
        if name in found:
            wanted = settings.config()
            have = found[name]
            wrong = {k: (v, have.get(k)) for k, v in wanted.items() if have.get(k) != v}
            if wrong:
                differences[name] = wrong
    return differences


async def test_rewardbus_topics_creates_every_topic_as_the_table_says(
    kafka: KafkaSettings,
) -> None:
    await ensure_topics(kafka, partitions=2, min_insync_replicas=1)
    found = await _configs(kafka, list(kafka.topics.all()))
    assert _differences(kafka, found) == {}
    assert {found[name]["min.insync.replicas"] for name in found} == {"1"}


async def test_the_aggregator_creates_its_state_topic_as_the_table_says(
    kafka: KafkaSettings,
) -> None:
    """The aggregator first: its state topic has the table's hourly segments too."""
    roles: list[TopicRole] = ["manifests", "rewards"]
    admin = AioClients(kafka).admin()
    async with running(admin):
        specs = [table_spec(kafka.topics, role, partitions=2) for role in roles]
        await kafkaio.ensure_topics(admin, specs, timeout_s=30)
    assert await prepare_topics(kafka, wait_s=30, clients=AioClients(kafka)) == 2
    state = kafka.topics.aggregator_state
    found = await _configs(kafka, [state])
    assert found[state]["segment.ms"] == "3600000"
    assert _differences(kafka, found) == {}
