"""A metered pipeline for the metrics tests: real broker, worker and aggregator processes.

``rewardbus worker --metrics-port 0`` and ``rewardbus aggregator --metrics-port 0``
run as separate processes (as deployed) and print their ``/metrics`` URL on their
ready line. A known workload goes through them once per session, so the tests can
hold the exported numbers against what was produced:

- ``ACCEPTED`` python completions that pass and ``WRONG`` that fail, every one with
  a ``response_length`` attribute (as the verl manager sends);
- one record that is not a Completion at all (dead-lettered);
- one manifest naming the judged samples, so one scored batch is emitted.

The fixtures (``metered``, ``prometheus``) are registered in ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from consumers import ScoredBatches
from kafkaio import AioClients, ProducerOptions, running
from producers import RolloutProducer
from rewardbus.observability.gotools import PROMETHEUS
from rewardbus.observability.prometheus import PrometheusConfig, PrometheusProcess
from rewardbus.observability.top import scrape
from rewardbus.topics import await_group_members, ensure_topics
from schemas import (
    BatchManifest,
    Completion,
    IoSuite,
    KafkaSettings,
    ScoredBatch,
    Topics,
    cache_root,
)
from tests.support.poll import until_sync
from tests.support.stages import stop_process

__all__ = [
    "ACCEPTED",
    "DEAD",
    "RESPONSE_LENGTH",
    "WRONG",
    "Metered",
    "metered",
    "prometheus",
    "scrape_text",
    "total",
]

ACCEPTED, WRONG, DEAD = 6, 3, 1
RESPONSE_LENGTH = 120
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
SUB = "a, b = map(int, input().split())\nprint(a - b)\n"
SUITE = IoSuite(inputs=["2 3\n", "10 -4\n"], outputs=["5\n", "6\n"])
_READY = re.compile(rb"ready \(metrics at (http://\S+/metrics)\)")


@dataclass(frozen=True)
class Metered:
    """The running pipeline and what went through it."""

    kafka: KafkaSettings
    worker_id: str
    worker_url: str
    aggregator_url: str
    scored: ScoredBatch
    partitions: int

    @property
    def urls(self) -> tuple[str, str]:
        return self.worker_url, self.aggregator_url

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(url.removeprefix("http://").removesuffix("/metrics") for url in self.urls)


def scrape_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return str(reply.read().decode("utf-8"))


async def _start(
    argv: list[str], log: Path, logs: contextlib.ExitStack
) -> tuple[asyncio.subprocess.Process, str]:
    """Start a service process; its /metrics URL from its ready line."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=logs.enter_context(log.open("wb"))
    )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=90)
    except TimeoutError:
        line = b""
    found = _READY.search(line)
    if found is None:
        await stop_process(proc)
        tail = await asyncio.to_thread(log.read_text, errors="replace")
        pytest.fail(f"{argv[3]} did not start ({line!r}):\n{tail[-3000:]}")
    return proc, found.group(1).decode()


def _workload(batch_id: str) -> list[Completion]:
    def completion(name: str, code: str) -> Completion:
        return Completion(
            sample_id=f"{batch_id}-{name}",
            batch_id=batch_id,
            group_id=f"{batch_id}-g",
            code=code,
            tests=SUITE,
            attributes={"response_length": str(RESPONSE_LENGTH)},
        )

    # Distinct sources (a comment each): every one is executed, none a cache hit of another.
    return [completion(f"ok{i}", f"# {batch_id} {i}\n{ADD}") for i in range(ACCEPTED)] + [
        completion(f"bad{i}", f"# {batch_id} {i}\n{SUB}") for i in range(WRONG)
    ]


async def _publish(kafka: KafkaSettings, completions: list[Completion], batch_id: str) -> None:
    manifest = BatchManifest(
        batch_id=batch_id,
        sample_ids=[c.sample_id for c in completions],
        group_ids=[c.group_id for c in completions],
        group_size=len(completions),
        deadline=time.time() + 120,
    )
    async with RolloutProducer(kafka) as producer:
        await producer.publish_manifest(manifest)
        await producer.publish_many(completions)
    raw = AioClients(kafka).producer(ProducerOptions())
    async with running(raw):  # not msgpack at all: the worker dead-letters it
        await raw.send_and_wait(kafka.topics.completions, b"\xc1 not a completion", key=b"junk")


@contextlib.asynccontextmanager
async def metered_pipeline(bootstrap: str, logs: Path) -> AsyncIterator[Metered]:
    run = uuid.uuid4().hex[:10]
    kafka = KafkaSettings(
        bootstrap_servers=bootstrap, topics=Topics(prefix=f"m{run}."), client_id="rb-test"
    )
    partitions = 2
    await ensure_topics(kafka, partitions=partitions)
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", kafka.topics.prefix]
    common += ["--metrics-port", "0"]
    worker_id = f"mw-{run}"
    with contextlib.ExitStack() as files:  # the services' logs, closed after they stop
        worker, worker_url = await _start(
            [sys.executable, "-m", "rewardbus", "worker", *common,
             "--group-id", f"{kafka.topics.prefix}workers", "--worker-id", worker_id,
             "--concurrency", "2"],
            logs / "worker.log",
            files,
        )  # fmt: skip
        try:
            aggregator, aggregator_url = await _start(
                [sys.executable, "-m", "rewardbus", "aggregator", *common,
                 "--group-id", f"{kafka.topics.prefix}aggregator"],
                logs / "aggregator.log",
                files,
            )  # fmt: skip
            try:
                await await_group_members(kafka, f"{kafka.topics.prefix}workers", 1)
                batch_id = f"mb-{run}"
                async with ScoredBatches(kafka, group_id=f"{kafka.topics.prefix}learner") as out:
                    await _publish(kafka, _workload(batch_id), batch_id)
                    scored = await asyncio.wait_for(anext(aiter(out)), timeout=120)
                metered = Metered(kafka, worker_id, worker_url, aggregator_url, scored, partitions)
                # The batch is out once its rewards are; the worker counts the dead letter
                # (and the last completion) when the broker acknowledged them.
                await asyncio.to_thread(_await_counts, metered)
                yield metered
            finally:
                await stop_process(aggregator)
        finally:
            await stop_process(worker)


def total(url: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s series on a live /metrics whose labels include ``labels``."""
    return sum(
        s.value
        for s in scrape(url)
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def _await_counts(metered: Metered) -> None:
    want = ACCEPTED + WRONG + DEAD
    until_sync(
        lambda: total(metered.worker_url, "rewardbus_worker_completions_total") == want,
        f"{want} completions counted",
        timeout_s=60,
    )


@pytest.fixture(scope="session")
async def metered(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Metered]:
    """The session's metered pipeline, its workload already through."""
    async with metered_pipeline(kafka_bootstrap, tmp_path_factory.mktemp("metered")) as running_:
        yield running_


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    binary = cache_root(os.environ) / "bin" / PROMETHEUS.binary_name
    if not binary.is_file():
        pytest.fail(
            f"{binary} is missing: `make observability-tools` builds it "
            "(`make test` runs that first)"
        )
    return binary


@pytest.fixture(scope="session")
def prometheus(metered: Metered, prometheus_binary: Path) -> Iterator[PrometheusProcess]:
    """A real Prometheus scraping the metered worker and aggregator every 0.5 s."""
    config = PrometheusConfig(port=0, targets=metered.targets, scrape_interval_s=0.5)
    with PrometheusProcess(config, binary=prometheus_binary) as running_:
        yield running_
