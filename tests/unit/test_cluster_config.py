"""Broker and cluster node configuration, without starting a JVM."""

from __future__ import annotations

from pathlib import Path

from rewardbus.runtime.broker import BrokerConfig
from rewardbus.runtime.broker.jvm import KafkaRuntime
from rewardbus.runtime.broker.server_properties import server_properties
from rewardbus.runtime.cluster import ClusterConfig, _node_configs


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_defaults_replicate_to_three_with_one_node_to_spare() -> None:
    assert (ClusterConfig().replicas, ClusterConfig().min_isr) == (3, 2)
    assert (ClusterConfig(brokers=1).replicas, ClusterConfig(brokers=1).min_isr) == (1, 1)
    assert (ClusterConfig(brokers=5).replicas, ClusterConfig(brokers=5).min_isr) == (3, 2)


def test_every_node_names_every_voter_and_shares_one_cluster_id(tmp_path: Path) -> None:
    nodes = _node_configs(ClusterConfig(brokers=3), tmp_path)
    assert [n.node_id for n in nodes] == [1, 2, 3]
    assert len({n.quorum_voters for n in nodes}) == 1
    assert len({n.cluster_id for n in nodes}) == 1
    voters = nodes[0].quorum_voters or ""
    assert voters.split(",") == [f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes]
    assert len({n.port for n in nodes} | {n.controller_port for n in nodes}) == 6
    assert {n.data_dir for n in nodes} == {tmp_path / f"node-{i}" for i in (1, 2, 3)}


def test_a_cluster_node_uses_the_static_quorum_and_replicates_internal_topics(
    tmp_path: Path,
) -> None:
    node = _node_configs(ClusterConfig(brokers=3), tmp_path)[1]
    props = _props(server_properties(node, node.port, node.controller_port, tmp_path))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == node.quorum_voters
    assert "controller.quorum.bootstrap.servers" not in props
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["min.insync.replicas"] == "2"


def test_a_single_broker_keeps_its_standalone_settings(tmp_path: Path) -> None:
    props = _props(server_properties(BrokerConfig(), 9092, 9093, tmp_path))
    assert props["node.id"] == "1"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert props["default.replication.factor"] == "1"


def test_a_preallocated_heap_is_committed_and_touched_at_start() -> None:
    runtime = KafkaRuntime(Path("/usr/bin/java"), Path("/opt/kafka/lib"))
    default = runtime.command(BrokerConfig(heap="256m"), Path("log4j2.properties"), [])
    assert "-Xmx256m" in default
    assert not any(flag.startswith("-Xms") or "AlwaysPreTouch" in flag for flag in default)
    preallocated = runtime.command(
        BrokerConfig(heap="256m", preallocate_heap=True), Path("log4j2.properties"), []
    )
    assert {"-Xmx256m", "-Xms256m", "-XX:+AlwaysPreTouch"} <= set(preallocated)
