"""The Kubernetes topics and the compose topics job say what schemas.TOPIC_TABLE says.

``rewardbus topics`` creates the topics from the table; ``infra/k8s/topics.yaml``
declares them again for Strimzi, and the compose file runs ``rewardbus topics`` with
its deployment's partition and replication flags. A manifest that drifts fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # stubs: types-PyYAML, not installed

from schemas import REPLICATED, TOPIC_TABLE, Partitioning, Topics

INFRA = Path(__file__).resolve().parents[2] / "infra"


def _k8s_topics(text: str) -> dict[str, dict[str, Any]]:
    """Each KafkaTopic's spec, by topic name."""
    docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    return {d["spec"]["topicName"]: d["spec"] for d in docs if d["kind"] == "KafkaTopic"}


def _drift(specs: dict[str, dict[str, Any]]) -> list[str]:
    """How the KafkaTopic specs differ from the table (nothing: they agree)."""
    topics = Topics()
    problems = [f"{name}: not in the table" for name in set(specs) - set(topics.all())]
    for role, settings in TOPIC_TABLE.items():
        name = topics.name(role)
        if name not in specs:
            problems.append(f"{name}: no KafkaTopic")
            continue
        spec = specs[name]
        # YAML reads 16777216 as an int and 0.1 as a float; Kafka's configs are strings.
        config = {key: str(value) for key, value in spec.get("config", {}).items()}
        wanted = settings.config() | REPLICATED.config()
        if config != wanted:
            problems.append(f"{name}: config {config}, the table says {wanted}")
        if spec["replicas"] != REPLICATED.factor:
            problems.append(f"{name}: {spec['replicas']} replicas, not {REPLICATED.factor}")
        if settings.partitioning is Partitioning.ONE and spec["partitions"] != 1:
            problems.append(f"{name}: {spec['partitions']} partitions, not 1")
    co_partitioned = {
        topics.name(role): specs[topics.name(role)]["partitions"]
        for role, settings in TOPIC_TABLE.items()
        if settings.partitioning is Partitioning.CO_PARTITIONED and topics.name(role) in specs
    }
    if len(set(co_partitioned.values())) > 1:
        problems.append(f"co-partitioned topics differ in partition count: {co_partitioned}")
    return problems


def _k8s_text() -> str:
    return (INFRA / "k8s" / "topics.yaml").read_text(encoding="utf-8")


def test_kubernetes_topics_are_the_table() -> None:
    assert _drift(_k8s_topics(_k8s_text())) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("    segment.ms: 3600000\n", "    segment.ms: 7200000\n", "rewardbus.aggregator-state"),
        ("    segment.ms: 3600000\n", "", "rewardbus.aggregator-state: config"),
        ("    retention.ms: 604800000\n", "    retention.ms: 1000\n", "rewardbus.result-cache"),
        ("  replicas: 3\n", "  replicas: 2\n", "rollouts.completions: 2 replicas"),
        ("  partitions: 1\n", "  partitions: 2\n", "rollouts.dlq: 2 partitions"),
        ("  topicName: rewardbus.attempts\n", "  topicName: attempts\n", "no KafkaTopic"),
    ],
)
def test_a_drifted_topic_is_named(old: str, new: str, problem: str) -> None:
    text = _k8s_text()
    assert old in text
    drift = _drift(_k8s_topics(text.replace(old, new, 1)))
    assert any(problem in line for line in drift), drift


def test_unequal_co_partitioned_counts_are_named() -> None:
    text = _k8s_text()
    state = text.index("topicName: rewardbus.aggregator-state")
    drifted = text[:state] + text[state:].replace("  partitions: 12\n", "  partitions: 6\n", 1)
    assert any("co-partitioned" in line for line in _drift(_k8s_topics(drifted)))


def _compose_flags() -> dict[str, str]:
    """The compose ``topics`` job's flags; it must run ``rewardbus topics`` (the image's
    entrypoint), so that its topics come from the table."""
    compose = yaml.safe_load((INFRA / "compose" / "docker-compose.yml").read_text())
    job = compose["services"]["topics"]
    assert "entrypoint" not in job, "the topics job must run the image's `rewardbus`"
    command, *args = job["command"]
    assert command == "topics"
    assert len(args) % 2 == 0, args
    return dict(zip(args[::2], args[1::2], strict=True))


def test_the_compose_topics_job_runs_rewardbus_topics_replicated() -> None:
    flags = _compose_flags()
    assert int(flags["--replication-factor"]) == REPLICATED.factor
    assert int(flags["--min-insync-replicas"]) == REPLICATED.min_insync_replicas
    assert int(flags["--partitions"]) >= 1


def test_the_compose_brokers_default_to_the_tables_replication() -> None:
    """Topics the brokers create themselves (offsets, transactions) are replicated alike."""
    compose = yaml.safe_load((INFRA / "compose" / "docker-compose.yml").read_text())
    env = compose["x-kafka-env"]
    assert int(env["KAFKA_REPLICATION_FACTOR"]) == REPLICATED.factor
    assert int(env["KAFKA_MIN_INSYNC_REPLICAS"]) == REPLICATED.min_insync_replicas
