"""Shared fixtures: the real Kafka broker (one per session) and fresh topic names per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas import KafkaSettings, Topics


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address of a real Apache Kafka broker.

    ``REWARDBUS_TEST_BOOTSTRAP`` points the suite at an existing cluster;
    otherwise the project's embedded KRaft broker is started for the session.
    """
    external = os.environ.get("REWARDBUS_TEST_BOOTSTRAP")
    if external:
        yield external
        return
    from rewardbus.runtime.broker import BrokerConfig, EmbeddedBroker

    broker = EmbeddedBroker(BrokerConfig(num_partitions=4))
    broker.start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


@pytest.fixture
def topics() -> Topics:
    """A fresh uuid-named topic prefix, so tests never see each other's records."""
    return Topics(prefix=f"t{uuid.uuid4().hex[:12]}.")


@pytest.fixture
def kafka(kafka_bootstrap: str, topics: Topics) -> KafkaSettings:
    """Settings for the session broker with this test's topic prefix."""
    return KafkaSettings(bootstrap_servers=kafka_bootstrap, topics=topics, client_id="rb-test")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
