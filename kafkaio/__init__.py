"""The Kafka seam: the one place below ``rewardbus`` where aiokafka is used.

Layout and import rules (DESIGN §3): ``kafkaio`` sits on the bottom floor beside
``schemas`` and imports only ``schemas`` and aiokafka (its clients in
:mod:`kafkaio.aio`, its ``TopicPartition`` class in :mod:`kafkaio.records`).
``producers``, ``sandbox_workers`` and ``consumers`` talk to Kafka only through
it, so their unit tests run on :class:`FakeBroker`; integration tests use the
real broker. Components take a ``clients`` argument (:class:`Clients`) that
defaults to :class:`AioClients` for their ``KafkaSettings``.

::

    records.py     Record, TopicPartition, Delivery: what flows through the seam
    options.py     ProducerOptions, ConsumerOptions, TopicSpec, TopicInfo
    protocols.py   Producer, Consumer, Admin, Clients, RebalanceListener (+ Rebalance), SendOptions
    aio.py         AioClients: those protocols over aiokafka (errors translated)
    fake.py        FakeBroker: the same protocols in memory, for unit tests
    lifecycle.py   Lifecycle (start/stop + async with), running(*parts)
    topics.py      wait_for_topics, wait_for_group, topic_partitions, assign_from, assign_at,
                   ensure_topic(s), table_spec(s), reply_topic_spec: topics from
                   schemas.TOPIC_TABLE
    produce.py     send_with_retries (bounded retries of retriable produce errors)
    deadletter.py  DeadLetterWriter: a record that cannot be processed, with the reason
    table.py       CompactedTopicReader: a compacted topic as an in-memory table
    lag.py         partition_lags: consumer lag per partition, for metrics
    spans.py       send_attributes, delivered_attributes, process_attributes,
                   completion_attributes: span attributes by OpenTelemetry's
                   messaging conventions

Errors (``reason`` says what failed; ``retriable`` whether trying again can help)::

    KafkaIOError          the broker or the client failed (a schemas.RewardbusError)
    ├── ProduceError      a record was not acknowledged
    ├── CommitFailed      an offset commit lost a race with a rebalance (not retriable)
    └── TopicNotFound     topics did not appear within the wait (create them first)
"""

from kafkaio.aio import AioClients
from kafkaio.deadletter import DeadLetterWriter
from kafkaio.errors import CommitFailed, KafkaIOError, ProduceError, TopicNotFound
from kafkaio.fake import FakeAdmin, FakeBroker, FakeConsumer, FakeProducer
from kafkaio.lag import partition_lags
from kafkaio.lifecycle import Lifecycle, running
from kafkaio.options import ConsumerOptions, ProducerOptions, TopicInfo, TopicSpec
from kafkaio.produce import send_with_retries
from kafkaio.protocols import (
    Admin,
    Clients,
    Consumer,
    Producer,
    Rebalance,
    RebalanceListener,
    SendOptions,
    Startable,
)
from kafkaio.records import Delivery, Record, TopicPartition
from kafkaio.spans import (
    SpanAttributes,
    completion_attributes,
    delivered_attributes,
    process_attributes,
    send_attributes,
)
from kafkaio.table import CompactedTopicReader, RecordHandler
from kafkaio.topics import (
    assign_at,
    assign_from,
    ensure_topic,
    ensure_topics,
    reply_topic_spec,
    table_spec,
    table_specs,
    topic_partitions,
    wait_for_group,
    wait_for_topics,
)

__all__ = [
    "Admin",
    "AioClients",
    "Clients",
    "CommitFailed",
    "CompactedTopicReader",
    "Consumer",
    "ConsumerOptions",
    "DeadLetterWriter",
    "Delivery",
    "FakeAdmin",
    "FakeBroker",
    "FakeConsumer",
    "FakeProducer",
    "KafkaIOError",
    "Lifecycle",
    "ProduceError",
    "Producer",
    "ProducerOptions",
    "Rebalance",
    "RebalanceListener",
    "Record",
    "RecordHandler",
    "SendOptions",
    "SpanAttributes",
    "Startable",
    "TopicInfo",
    "TopicNotFound",
    "TopicPartition",
    "TopicSpec",
    "assign_at",
    "assign_from",
    "completion_attributes",
    "delivered_attributes",
    "ensure_topic",
    "ensure_topics",
    "partition_lags",
    "process_attributes",
    "reply_topic_spec",
    "running",
    "send_attributes",
    "send_with_retries",
    "table_spec",
    "table_specs",
    "topic_partitions",
    "wait_for_group",
    "wait_for_topics",
]
