"""What clients are told (options) and what the cluster says about topics (specs, infos)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ConsumerOptions", "ProducerOptions", "TopicInfo", "TopicSpec"]


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
