"""testcontainers fixtures: the project's own images on a local Docker engine.

`make test-images` builds rewardbus-kafka / -worker / -aggregator (infra/docker/images.sh)
and `.ci/run` starts the engine (infra/docker/dockerd.sh). Without an engine or the
images these tests fail, saying which: they are never skipped. Ryuk (testcontainers'
reaper) is disabled because its image cannot be pulled here; fixtures stop what
they start.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import docker
import pytest
from testcontainers.core.container import DockerContainer

from rewardbus.topics import ensure_topics
from schemas import KafkaSettings, Topics
from tests.containers.harness import (
    FULL_WORKER_IMAGE,
    KAFKA_IMAGE,
    PARTITIONS,
    SECCOMP_PROFILE,
    WORKER_IMAGE,
    RewardLog,
    container_ip,
    wait_for_log,
)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[docker.DockerClient]:
    """A client of the local engine; fails (never skips) when it or an image is missing."""
    try:
        # Creating (and removing) a container of the 4 GB full worker copies its layers on the
        # vfs engine: over a minute under load, past the client's default 60 s read timeout.
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(
            f"no Docker engine answers ({exc}): install docker.io and run"
            " infra/docker/dockerd.sh (`.ci/run` and `make images` do)",
            pytrace=False,
        )
    images = (KAFKA_IMAGE, WORKER_IMAGE, FULL_WORKER_IMAGE)
    missing = [i for i in images if not _has_image(client, i)]
    if missing or not SECCOMP_PROFILE.is_file():
        pytest.fail(
            f"missing {missing or [str(SECCOMP_PROFILE)]}: run `make test-images`",
            pytrace=False,
        )
    yield client
    client.close()


def _has_image(client: docker.DockerClient, name: str) -> bool:
    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return True


@pytest.fixture(scope="session")
def kafka_container(docker_engine: docker.DockerClient) -> Iterator[str]:
    """A single-node KRaft broker from rewardbus-kafka; yields its bootstrap address."""
    container = DockerContainer(KAFKA_IMAGE, name=f"rb-kafka-{uuid.uuid4().hex[:8]}")
    container.start()
    try:
        asyncio.run(wait_for_log(container, "Kafka Server started", timeout_s=180))
        yield f"{container_ip(container)}:9092"
    finally:
        container.stop()


@pytest.fixture
async def ckafka(kafka_container: str) -> KafkaSettings:
    """Settings for the container broker with this test's fresh topics."""
    topics = Topics(prefix=f"t{uuid.uuid4().hex[:12]}.")
    kafka = KafkaSettings(bootstrap_servers=kafka_container, topics=topics, client_id="rb-ct")
    await ensure_topics(kafka, partitions=PARTITIONS)
    return kafka


@pytest.fixture
async def reward_log(ckafka: KafkaSettings) -> AsyncIterator[RewardLog]:
    log = RewardLog(ckafka)
    stop = asyncio.Event()
    task = asyncio.create_task(log.follow(stop))
    yield log
    stop.set()
    await task
