"""How to run an embedded broker (`BrokerConfig`) and where its Kafka jars are."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from schemas import cache_root

__all__ = ["KAFKA_VERSION", "BrokerConfig", "default_kafka_lib"]

KAFKA_VERSION = "4.1.1"


@dataclass(frozen=True)
class BrokerConfig:
    """How to run the embedded broker. Every field has a working default.

    kafka_lib: directory of Kafka jars; None means `default_kafka_lib()`.
    data_dir: where storage, configuration and broker.log live; None means a fresh temporary
        directory, removed on stop. A given directory is kept and reused on the next start.
    port / controller_port: 0 picks a free port at start.
    num_partitions: default partition count of auto-created topics.
    heap: the JVM's maximum heap (-Xmx).
    preallocate_heap: commit and touch the whole heap at start (-Xms = -Xmx and
        AlwaysPreTouch), as production Kafka is run. The resident size then no longer
        grows while the heap fills towards -Xmx, so growth in it is memory outside the
        heap (bench_soak runs the broker so); off by default, because the demo's broker
        would hold the whole heap from its first second.
    startup_timeout_s: budget for formatting storage plus the broker becoming ready.
    node_id / quorum_voters / cluster_id: one node of a multi-node cluster
        (`rewardbus.runtime.cluster`): Kafka's `controller.quorum.voters` ("1@host:port,2@...") and
        the storage id all its nodes share. None (the default) is a single node formatted
        `--standalone` with a fresh id.
    replication_factor / min_insync_replicas: for the internal topics and as the defaults of
        new topics; 1 on a single node.
    """

    kafka_lib: Path | None = None
    data_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 0
    controller_port: int = 0
    num_partitions: int = 4
    heap: str = "512m"
    preallocate_heap: bool = False
    startup_timeout_s: float = 60.0
    node_id: int = 1
    quorum_voters: str | None = None
    cluster_id: str | None = None
    replication_factor: int = 1
    min_insync_replicas: int = 1


def default_kafka_lib() -> Path:
    """The jar directory `make kafka-jars` fills: $REWARDBUS_KAFKA_LIB, else the user cache."""
    explicit = os.environ.get("REWARDBUS_KAFKA_LIB")
    if explicit:
        return Path(explicit)
    return cache_root(os.environ) / f"kafka-{KAFKA_VERSION}" / "lib"
