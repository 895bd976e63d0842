"""What a node's server.properties is made of: its ports, the rendered file, its cluster id.

The cluster module uses the same pieces to give every node of a quorum its ports and one
shared cluster id up front.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from rewardbus.runtime.broker.config import BrokerConfig

__all__ = ["new_cluster_id", "server_properties"]

_INTERNAL_TOPIC_PARTITIONS = 4


def new_cluster_id() -> str:
    """A fresh storage id, as Kafka's `Uuid.toString` spells one."""
    # Url-safe base64 without padding; Kafka never issues one that starts with "-"
    # because command lines would read it as an option.
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def server_properties(config: BrokerConfig, port: int, controller_port: int, log_dir: Path) -> str:
    """The text of server.properties for one combined broker-and-controller node."""
    host = config.host
    internal_topics = str(_INTERNAL_TOPIC_PARTITIONS)
    replicas, min_isr = str(config.replication_factor), str(config.min_insync_replicas)
    quorum = (
        {"controller.quorum.voters": config.quorum_voters}
        if config.quorum_voters
        else {"controller.quorum.bootstrap.servers": f"{host}:{controller_port}"}
    )
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(config.node_id),
        **quorum,
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": str(config.num_partitions),
        "auto.create.topics.enable": "true",
        # 1 on one node; a cluster's nodes replicate everything, internal topics included.
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        # The defaults (50 partitions each) are sized for clusters; on one node they only
        # slow the first consumer group and transaction down.
        "offsets.topic.num.partitions": internal_topics,
        "transaction.state.log.num.partitions": internal_topics,
        "share.coordinator.state.topic.num.partitions": internal_topics,
        "group.initial.rebalance.delay.ms": "0",
        # Unfencing waits for broker heartbeats; the 2 s default is most of start-up time.
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "6000",
        # The cleaner stays on (compacted topics are used); its default 128 MiB dedupe
        # buffer would take a quarter of a small heap.
        "log.cleaner.enable": "true",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        # Frugal thread pools for a 2-core machine.
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())
