"""Topic names, with a configurable prefix so several trainers can share a cluster, and
the one table of every topic's settings (:data:`TOPIC_TABLE`).

Everything that creates topics takes them from the table: ``rewardbus topics`` (and
the compose ``topics`` job, which runs it), the aggregator's state topic, the tests,
through :mod:`kafkaio`; ``infra/k8s/topics.yaml`` is checked against it by a test.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

__all__ = [
    "MAX_RECORD_BYTES",
    "REPLICATED",
    "REPLY_TOPIC",
    "TOPIC_TABLE",
    "Partitioning",
    "Replication",
    "TopicRole",
    "TopicSettings",
    "Topics",
]


# The largest record rewardbus writes or accepts: CodeContests-sized test suites are
# megabytes, so the topics that carry them (completions, problems, and the DLQ, which
# keeps a failed completion's bytes) take records up to this size (Kafka's default is
# about 1 MiB), and every producer of them may send requests this large.
MAX_RECORD_BYTES = 16 << 20

# The deployment's topics, by the name of their Topics property.
TopicRole = Literal[
    "completions",
    "rewards",
    "manifests",
    "scored",
    "dlq",
    "problems",
    "aggregator_state",
    "result_cache",
    "attempts",
    "tool_calls",
]


@dataclass(frozen=True)
class Topics:
    """The topic names of one rewardbus deployment.

    >>> Topics(prefix="exp1.").completions
    'exp1.rollouts.completions'
    """

    prefix: str = ""

    @property
    def completions(self) -> str:
        return f"{self.prefix}rollouts.completions"

    @property
    def rewards(self) -> str:
        return f"{self.prefix}rollouts.rewards"

    @property
    def manifests(self) -> str:
        return f"{self.prefix}rollouts.manifests"

    @property
    def scored(self) -> str:
        return f"{self.prefix}rollouts.scored"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}rollouts.dlq"

    @property
    def problems(self) -> str:
        return f"{self.prefix}rewardbus.problems"

    @property
    def result_cache(self) -> str:
        return f"{self.prefix}rewardbus.result-cache"

    @property
    def aggregator_state(self) -> str:
        return f"{self.prefix}rewardbus.aggregator-state"

    @property
    def attempts(self) -> str:
        """Compacted: how often each completion record was started (the quarantine ledger)."""
        return f"{self.prefix}rewardbus.attempts"

    @property
    def tool_calls(self) -> str:
        return f"{self.prefix}rollouts.tool_calls"

    @property
    def replies_prefix(self) -> str:
        """Every reply topic starts with this; workers produce to no other reply topic."""
        return f"{self.prefix}rewardbus.replies."

    def reply_topic(self, client: str) -> str:
        """The reply topic of one waiting client (e.g. one verl reward-loop process).

        >>> Topics(prefix="exp1.").reply_topic("host-42")
        'exp1.rewardbus.replies.host-42'
        """
        return f"{self.replies_prefix}{client}"

    def is_reply_topic(self, topic: str) -> bool:
        """Whether ``topic`` names a reply topic of this deployment."""
        suffix = topic.removeprefix(self.replies_prefix)
        return suffix != topic and bool(suffix) and all(c.isalnum() or c in "._-" for c in suffix)

    def name(self, role: TopicRole) -> str:
        """The name of one of the deployment's topics.

        >>> Topics(prefix="exp1.").name("dlq")
        'exp1.rollouts.dlq'
        """
        name: str = getattr(self, role)
        return name

    def all(self) -> tuple[str, ...]:
        """Every topic, in creation order (the order of :data:`TOPIC_TABLE`)."""
        return tuple(self.name(role) for role in TOPIC_TABLE)


class Partitioning(enum.Enum):
    """How many partitions a topic has in a deployment of ``N`` (``topics --partitions N``)."""

    DEPLOYMENT = "deployment"
    """``N``, and free to differ from the other topics' counts (completions: more partitions
    allow more workers; see docs/scaling.md)."""
    CO_PARTITIONED = "co-partitioned"
    """``N``, and always equal among these topics: they are keyed by batch_id (the state
    topic: by the aggregator's input partition), so one aggregator instance sees all of a
    batch and restores exactly the state of its input partitions."""
    ONE = "one"
    """A single partition, whatever ``N``."""


@dataclass(frozen=True)
class TopicSettings:
    """What one topic is created with; ``None`` leaves the broker's default."""

    partitioning: Partitioning
    cleanup_policy: Literal["delete", "compact", "compact,delete"] = "delete"
    retention_ms: int | None = None
    segment_ms: int | None = None
    max_message_bytes: int | None = None
    min_cleanable_dirty_ratio: float | None = None
    delete_retention_ms: int | None = None

    def partitions(self, deployment: int) -> int:
        """This topic's partition count in a deployment of ``deployment`` partitions."""
        return 1 if self.partitioning is Partitioning.ONE else deployment

    def config(self) -> dict[str, str]:
        """The topic configs (Kafka's names and string values) this topic is created with."""
        configs = {
            "cleanup.policy": self.cleanup_policy,
            "retention.ms": self.retention_ms,
            "segment.ms": self.segment_ms,
            "max.message.bytes": self.max_message_bytes,
            "min.cleanable.dirty.ratio": self.min_cleanable_dirty_ratio,
            "delete.retention.ms": self.delete_retention_ms,
        }
        return {key: str(value) for key, value in configs.items() if value is not None}


@dataclass(frozen=True)
class Replication:
    """How every topic of a deployment is replicated (the same for all of them)."""

    factor: int = 1
    min_insync_replicas: int | None = None
    """None: the broker's setting."""

    def config(self) -> dict[str, str]:
        """The topic configs this replication adds."""
        if self.min_insync_replicas is None:
            return {}
        return {"min.insync.replicas": str(self.min_insync_replicas)}


# What the compose file and the Kubernetes manifests run: with 3 replicas and 2 in sync,
# an acks=all write survives one broker down and is never acknowledged by one alone.
REPLICATED = Replication(factor=3, min_insync_replicas=2)

_HOUR_MS = 3600 * 1000

TOPIC_TABLE: Mapping[TopicRole, TopicSettings] = MappingProxyType(
    {
        # Keyed by sample_id: the workers' unit of parallelism. CodeContests-sized
        # suites are megabytes.
        "completions": TopicSettings(Partitioning.DEPLOYMENT, max_message_bytes=MAX_RECORD_BYTES),
        "rewards": TopicSettings(Partitioning.CO_PARTITIONED),
        "manifests": TopicSettings(Partitioning.CO_PARTITIONED),
        "scored": TopicSettings(Partitioning.CO_PARTITIONED),
        # Keeps a failed completion's bytes.
        "dlq": TopicSettings(Partitioning.ONE, max_message_bytes=MAX_RECORD_BYTES),
        # The latest version of each problem (its test suite: megabytes).
        "problems": TopicSettings(
            Partitioning.DEPLOYMENT, cleanup_policy="compact", max_message_bytes=MAX_RECORD_BYTES
        ),
        # Compaction never touches the active segment: it rolls hourly, so that an
        # aggregator's restore reads compacted state rather than days of history.
        "aggregator_state": TopicSettings(
            Partitioning.CO_PARTITIONED, cleanup_policy="compact", segment_ms=_HOUR_MS
        ),
        # Fingerprints are unbounded (every distinct program adds one) and every worker
        # replays the topic at start-up: compaction alone would let it grow for ever, so
        # entries also expire after a week (docs/result-cache.md).
        "result_cache": TopicSettings(
            Partitioning.DEPLOYMENT, cleanup_policy="compact,delete", retention_ms=7 * 24 * _HOUR_MS
        ),
        # The quarantine ledger holds one live entry per record in flight: its tombstones
        # must go soon (every worker replays the topic), so segments roll and clean often.
        "attempts": TopicSettings(
            Partitioning.DEPLOYMENT,
            cleanup_policy="compact",
            segment_ms=60_000,
            min_cleanable_dirty_ratio=0.1,
            delete_retention_ms=60_000,
        ),
        # Keyed by session id: one worker owns a session while its partition stays put.
        # A call is waited on for seconds; an hour keeps enough to debug with.
        "tool_calls": TopicSettings(
            Partitioning.DEPLOYMENT, retention_ms=_HOUR_MS, max_message_bytes=MAX_RECORD_BYTES
        ),
    }
)
"""Every topic of a deployment, in creation order, with what it is created with."""

# One per waiting client (Topics.reply_topic): replies are read within seconds, and a
# client killed outright leaves its topic to retention, which keeps nothing for long.
REPLY_TOPIC = TopicSettings(Partitioning.ONE, retention_ms=_HOUR_MS)
