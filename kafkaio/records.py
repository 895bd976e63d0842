"""The seam's value objects: records, partitions, deliveries, topics and client options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol

__all__ = [
    "ConsumerOptions",
    "Delivery",
    "ProducerOptions",
    "Record",
    "TopicInfo",
    "TopicPartition",
    "TopicSpec",
]

if TYPE_CHECKING:

    class TopicPartition(NamedTuple):
        """A topic and one of its partitions."""

        topic: str
        partition: int

else:
    # aiokafka checks isinstance() on the partitions it is given: its own class, typed
    # above, is passed through both ways without a conversion per call.
    from aiokafka.structs import TopicPartition


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed record: where it is, its bytes, its headers, its timestamp."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]] = ()
    timestamp_ms: int = 0


class Delivery(Protocol):
    """Where the broker put an acknowledged record."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create."""

    name: str
    partitions: int
    replication_factor: int = 1
    config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicInfo:
    """A topic as the cluster metadata describes it."""

    name: str
    partitions: int
    replicas: int


@dataclass(frozen=True)
class ProducerOptions:
    """How a producer batches and acknowledges; None leaves the client's default."""

    acks: Literal[0, 1, "all"] = "all"
    idempotent: bool = True
    linger_ms: int = 0
    compression: str | None = None
    max_batch_bytes: int | None = None
    max_request_bytes: int | None = None
    request_timeout_ms: int | None = None


@dataclass(frozen=True)
class ConsumerOptions:
    """How a consumer joins, starts and fetches; None leaves the client's default.

    Offsets are never committed automatically: a component commits what it has
    finished. Without ``group_id`` the consumer is on its own (``assign``, or
    ``subscribe`` for every partition of the topics).
    """

    group_id: str | None = None
    group_instance_id: str | None = None
    from_beginning: bool = True
    read_committed: bool = True
    # "range" keeps partition p of co-partitioned topics on one member.
    assignor: Literal["roundrobin", "range"] = "roundrobin"
    session_timeout_ms: int | None = None
    heartbeat_interval_ms: int | None = None
    max_poll_records: int | None = None
    fetch_max_wait_ms: int | None = None
    fetch_min_bytes: int | None = None
