"""A multi-node KRaft Kafka cluster of embedded brokers, for fault tests and local scale-out.

Each node is an :class:`~rewardbus.runtime.broker.EmbeddedBroker` in combined mode (broker and
controller in one JVM) with its own data directory and ports; the nodes form one static
controller quorum (`controller.quorum.voters`), so any minority of them can die and the rest
keep serving. Internal topics are replicated to every node (up to 3) with a min ISR of one
less, which is also the default for new topics: with 3 nodes and acks=all, one node may be
down and nothing acknowledged is lost.

:meth:`Cluster.kill` SIGKILLs one node as a crash would and :meth:`Cluster.restart` brings
it back on the same ports and data, which is what tests/integration/test_cluster.py does to
the partition leaders mid-run. Errors are :class:`~rewardbus.runtime.broker.BrokerError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from rewardbus.runtime.broker import BrokerConfig, BrokerError, EmbeddedBroker
from rewardbus.runtime.broker.server_properties import new_cluster_id
from rewardbus.runtime.ports import free_ports
from rewardbus.runtime.service import BlockingService

__all__ = ["Cluster", "ClusterConfig", "serve_cluster"]

_MAX_REPLICAS = 3


@dataclass(frozen=True)
class ClusterConfig:
    """How to run the cluster. Every field has a working default.

    brokers: how many nodes; every one is a broker and a controller voter.
    data_dir: the parent of each node's `node-<id>` directory; None means a temporary
        directory, removed on stop. Nodes always keep their data across kill() and restart().
    replication_factor / min_insync_replicas: None means min(3, brokers) and one less (at
        least 1): one node down still leaves an acks=all write enough replicas.
    heap: each JVM's maximum heap; three nodes on a small machine want less than one does.
    """

    brokers: int = 3
    kafka_lib: Path | None = None
    data_dir: Path | None = None
    host: str = "127.0.0.1"
    num_partitions: int = 4
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    heap: str = "384m"
    startup_timeout_s: float = 120.0

    @property
    def replicas(self) -> int:
        """The replication factor the nodes are configured with."""
        return self.replication_factor or min(_MAX_REPLICAS, self.brokers)

    @property
    def min_isr(self) -> int:
        """The min.insync.replicas the nodes are configured with."""
        return self.min_insync_replicas or max(1, self.replicas - 1)


def _node_configs(config: ClusterConfig, root: Path) -> list[BrokerConfig]:
    """One BrokerConfig per node: ports fixed up front, because every node names every
    controller in its voter list, and kept on restart."""
    if config.brokers < 1:
        raise BrokerError(f"a cluster needs at least one broker, not {config.brokers}")
    ports = free_ports(config.host, 2 * config.brokers)
    client, controller = ports[: config.brokers], ports[config.brokers :]
    ids = range(1, config.brokers + 1)
    voters = ",".join(f"{i}@{config.host}:{port}" for i, port in zip(ids, controller, strict=True))
    cluster_id = new_cluster_id()
    return [
        BrokerConfig(
            kafka_lib=config.kafka_lib,
            data_dir=root / f"node-{i}",
            host=config.host,
            port=client_port,
            controller_port=controller_port,
            num_partitions=config.num_partitions,
            heap=config.heap,
            startup_timeout_s=config.startup_timeout_s,
            node_id=i,
            quorum_voters=voters,
            cluster_id=cluster_id,
            replication_factor=config.replicas,
            min_insync_replicas=config.min_isr,
        )
        for i, client_port, controller_port in zip(ids, client, controller, strict=True)
    ]


class Cluster(BlockingService):
    """N real Kafka nodes in child JVMs forming one KRaft cluster on 127.0.0.1.

    Use it as a (sync or async) context manager, or call `start()` and `stop()`. Like a
    single EmbeddedBroker, no node outlives this process.
    """

    def __init__(self, config: ClusterConfig = ClusterConfig()) -> None:
        self._config = config
        self._temp_dir: Path | None = None
        self._nodes: dict[int, EmbeddedBroker] = {}

    @property
    def config(self) -> ClusterConfig:
        """The configuration this cluster was made with."""
        return self._config

    @property
    def node_ids(self) -> list[int]:
        """The node ids (1..N) once started."""
        return sorted(self._nodes)

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client address, comma-separated: clients bootstrap from any live one."""
        if not self._nodes:
            raise BrokerError("the cluster's ports are chosen by start(): start it first")
        return ",".join(self._nodes[i].bootstrap_servers for i in self.node_ids)

    def node(self, node_id: int) -> EmbeddedBroker:
        """The broker with Kafka node id `node_id`."""
        try:
            return self._nodes[node_id]
        except KeyError:
            raise BrokerError(f"no node {node_id} in this cluster ({self.node_ids})") from None

    def start(self) -> None:
        """Format and launch every node at once and return when all serve clients.

        They start together because none is ready before a majority of controllers is up.
        On failure every node is stopped and BrokerError says which one failed first.
        """
        if self._nodes:
            raise BrokerError("the cluster is already started")
        root = self._config.data_dir
        if root is None:
            root = self._temp_dir = Path(tempfile.mkdtemp(prefix="rewardbus-cluster-"))
        configs = _node_configs(self._config, root)
        self._nodes = {c.node_id: EmbeddedBroker(c) for c in configs}
        try:
            self._in_parallel(lambda broker: broker.start())
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop every node (SIGTERM, then SIGKILL after timeout_s) and remove temporary data."""
        nodes, self._nodes = self._nodes, {}
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            list(pool.map(lambda broker: broker.stop(timeout_s), nodes.values()))
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def kill(self, node_id: int) -> None:
        """SIGKILL one node, as a crash would; its data stays for restart()."""
        self.node(node_id).kill()

    def restart(self, node_id: int) -> None:
        """Start a killed or stopped node again on its ports and data; returns when it serves."""
        self.node(node_id).start()

    def _in_parallel(self, action: Callable[[EmbeddedBroker], None]) -> None:
        """Run `action` on every node at once; the first failure aborts the others' start-up
        (they would wait their whole timeout for a quorum that is not coming)."""
        with ThreadPoolExecutor(max_workers=len(self._nodes)) as pool:
            futures = [pool.submit(action, broker) for broker in self._nodes.values()]
            for future in as_completed(futures):
                if future.exception() is not None:
                    for broker in self._nodes.values():
                        broker.stop(timeout_s=0)
                    future.result()


async def serve_cluster(
    config: ClusterConfig,
    *,
    shutdown: Awaitable[object],
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Run a cluster until `shutdown` completes (the CLI's `rewardbus cluster`).

    `on_ready` receives the bootstrap servers. Raises BrokerError if the cluster cannot start.
    """
    cluster = Cluster(config)
    try:
        await asyncio.to_thread(cluster.start)
        if on_ready is not None:
            on_ready(cluster.bootstrap_servers)
        await shutdown
    finally:
        with contextlib.suppress(BrokerError):
            await asyncio.to_thread(cluster.stop)
