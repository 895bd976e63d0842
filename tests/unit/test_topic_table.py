"""The topic table, and the topics created from it on the in-memory broker."""

from __future__ import annotations

import pytest

from consumers.state_store import AggregatorError, prepare_topics
from kafkaio import FakeBroker, reply_topic_spec, table_spec, table_specs
from rewardbus.topics import ensure_topics
from schemas import (
    MAX_RECORD_BYTES,
    REPLICATED,
    TOPIC_TABLE,
    KafkaSettings,
    Partitioning,
    Replication,
    Topics,
)

KAFKA_TOPICS = Topics(prefix="unit.")
KAFKA = KafkaSettings("fake:9092", topics=KAFKA_TOPICS)


def test_every_topic_of_a_deployment_is_in_the_table_once() -> None:
    names = [KAFKA_TOPICS.name(role) for role in TOPIC_TABLE]
    assert names == list(KAFKA_TOPICS.all())
    assert len(set(names)) == len(names) == 10
    assert KAFKA_TOPICS.name("aggregator_state") == KAFKA_TOPICS.aggregator_state


def test_the_settings_each_topic_relies_on() -> None:
    configs = {role: settings.config() for role, settings in TOPIC_TABLE.items()}
    large = str(MAX_RECORD_BYTES)
    assert configs["completions"] == {"cleanup.policy": "delete", "max.message.bytes": large}
    assert configs["problems"] == {"cleanup.policy": "compact", "max.message.bytes": large}
    assert configs["dlq"]["max.message.bytes"] == large
    # The aggregator's restore reads compacted state: its segments roll hourly.
    assert configs["aggregator_state"] == {"cleanup.policy": "compact", "segment.ms": "3600000"}
    assert configs["result_cache"] == {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(7 * 24 * 3600 * 1000),
    }
    assert configs["attempts"] == {
        "cleanup.policy": "compact",
        "segment.ms": "60000",
        "min.cleanable.dirty.ratio": "0.1",
        "delete.retention.ms": "60000",
    }
    co_partitioned = {
        role for role, s in TOPIC_TABLE.items() if s.partitioning is Partitioning.CO_PARTITIONED
    }
    assert co_partitioned == {"rewards", "manifests", "scored", "aggregator_state"}


def test_a_spec_takes_the_deployments_partitions_and_replication() -> None:
    specs = {s.name: s for s in table_specs(KAFKA_TOPICS, partitions=12, replication=REPLICATED)}
    assert specs[KAFKA_TOPICS.dlq].partitions == 1
    assert {s.partitions for n, s in specs.items() if n != KAFKA_TOPICS.dlq} == {12}
    assert {s.replication_factor for s in specs.values()} == {3}
    assert all(s.config["min.insync.replicas"] == "2" for s in specs.values())
    local = table_spec(KAFKA_TOPICS, "rewards", partitions=4)
    assert (local.partitions, local.replication_factor) == (4, 1)
    assert "min.insync.replicas" not in local.config  # the broker's own setting
    assert Replication().config() == {}


def test_a_reply_topic_has_one_partition_and_short_retention() -> None:
    spec = reply_topic_spec(KAFKA_TOPICS.reply_topic("host-1"), 3)
    assert (spec.partitions, spec.replication_factor) == (1, 3)
    assert spec.config == {"cleanup.policy": "delete", "retention.ms": "3600000"}


async def test_ensure_topics_creates_the_table_once() -> None:
    broker = FakeBroker()
    await ensure_topics(KAFKA, partitions=3, clients=broker)
    created = dict(broker.topic_configs)
    assert set(created) == set(KAFKA_TOPICS.all())
    assert {name: len(broker.logs[name]) for name in created} == {
        name: 1 if name == KAFKA_TOPICS.dlq else 3 for name in created
    }
    assert created[KAFKA_TOPICS.aggregator_state] == TOPIC_TABLE["aggregator_state"].config()
    await ensure_topics(KAFKA, partitions=5, clients=broker)  # exists: left as it is
    assert len(broker.logs[KAFKA_TOPICS.rewards]) == 3


async def test_the_aggregator_creates_its_state_topic_from_the_table() -> None:
    """Whichever runs first, `rewardbus topics` or the aggregator, the state topic is the same."""
    broker = FakeBroker()
    broker.create_topic(KAFKA_TOPICS.manifests, 3)
    broker.create_topic(KAFKA_TOPICS.rewards, 3)
    assert await prepare_topics(KAFKA, wait_s=1, clients=broker) == 3
    assert len(broker.logs[KAFKA_TOPICS.aggregator_state]) == 3
    state = broker.topic_configs[KAFKA_TOPICS.aggregator_state]
    assert state == table_spec(KAFKA_TOPICS, "aggregator_state", partitions=3).config


async def test_the_aggregator_refuses_a_state_topic_of_another_partition_count() -> None:
    broker = FakeBroker()
    for topic in (KAFKA_TOPICS.manifests, KAFKA_TOPICS.rewards):
        broker.create_topic(topic, 3)
    broker.create_topic(KAFKA_TOPICS.aggregator_state, 2)
    with pytest.raises(AggregatorError, match="state partition p"):
        await prepare_topics(KAFKA, wait_s=1, clients=broker)
