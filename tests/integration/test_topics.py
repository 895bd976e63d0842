"""On the broker, every topic has what the topic table says, whoever created it first."""

from __future__ import annotations

import kafkaio
from consumers.state_store import prepare_topics
from kafkaio import AioClients, running, table_spec
from rewardbus.topics import ensure_topics
from schemas import TOPIC_TABLE, KafkaSettings, TopicRole
from tests.support.broker_state import topic_configs

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
    found = await topic_configs(kafka, list(kafka.topics.all()))
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
    found = await topic_configs(kafka, [state])
    assert found[state]["segment.ms"] == "3600000"
    assert _differences(kafka, found) == {}
