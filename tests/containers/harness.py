"""Helpers for the container tests: the project's images driven through testcontainers."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

from testcontainers.core.container import DockerContainer

from kafkaio import AioClients, ConsumerOptions, running
from schemas import KafkaSettings, RewardEvent, cache_root, decode
from tests.support import broker_state

KAFKA_IMAGE = os.environ.get("REWARDBUS_KAFKA_IMAGE", "rewardbus-kafka:latest")
# The worker of `make test-images` (four languages), by the tag naming its languages:
# :latest is whichever worker images.sh built last.
WORKER_IMAGE = os.environ.get("REWARDBUS_WORKER_IMAGE", "rewardbus-worker:python-bash-perl-sql")
# The worker of `make images`, with every language: what a deployment runs.
FULL_WORKER_LANGUAGES = (
    "python", "c", "cpp", "bash", "perl", "sql", "javascript", "java", "go", "rust",
    "typescript", "php", "ruby", "lua", "r", "racket", "d", "csharp", "kotlin", "scala",
    "haskell", "ocaml",
)  # fmt: skip
FULL_WORKER_IMAGE = os.environ.get(
    "REWARDBUS_FULL_WORKER_IMAGE", "rewardbus-worker:" + "-".join(FULL_WORKER_LANGUAGES)
)
SECCOMP_PROFILE = cache_root(os.environ) / "images" / "seccomp-worker.json"
PARTITIONS = 6


def least_privilege() -> dict[str, Any]:
    """docker run options of the worker's least-privilege set (docs/containers.md)."""
    return {
        "cap_add": ["SYS_ADMIN", "NET_ADMIN"],
        # The engine's API takes the profile's text, not a path (the CLI reads the file).
        "security_opt": [f"seccomp={SECCOMP_PROFILE.read_text()}", "apparmor=unconfined"],
        "cgroupns": "private",
    }


def container_ip(container: DockerContainer) -> str:
    """The container's bridge address: reachable from this host and from other containers."""
    wrapped = container.get_wrapped_container()
    wrapped.reload()
    return str(wrapped.attrs["NetworkSettings"]["IPAddress"])


async def wait_for_log(container: DockerContainer, text: str, timeout_s: float) -> float:
    """Seconds until ``text`` appears in the container's output; fails if it exits first."""
    started = time.monotonic()
    async with asyncio.timeout(timeout_s):
        while True:
            out, err = await asyncio.to_thread(container.get_logs)
            if text.encode() in out or text.encode() in err:
                return time.monotonic() - started
            wrapped = container.get_wrapped_container()
            await asyncio.to_thread(wrapped.reload)
            if wrapped.status in ("exited", "dead"):
                tail = (out + err).decode(errors="replace")[-3000:]
                raise AssertionError(f"container exited before {text!r}:\n{tail}")
            await asyncio.sleep(0.2)  # polling the engine's log endpoint, under the deadline


def worker_container(
    kafka: KafkaSettings, worker_id: str, *, privileges: dict[str, Any] | None = None
) -> DockerContainer:
    """A rewardbus-worker container in strict mode (the default), not started yet."""
    command = [
        "worker",
        "--bootstrap-servers", kafka.bootstrap_servers,
        "--topic-prefix", kafka.topics.prefix,
        "--group-id", f"{kafka.topics.prefix}workers",
        "--worker-id", worker_id,
        "--result-cache-mb", "0",
    ]  # fmt: skip
    options = least_privilege() if privileges is None else privileges
    return DockerContainer(
        WORKER_IMAGE, command=command, name=f"rb-{worker_id}-{uuid.uuid4().hex[:8]}", **options
    )


async def start_worker(container: DockerContainer, timeout_s: float = 240) -> float:
    """Start a worker container; seconds until it printed its ready line."""
    started = time.monotonic()
    await asyncio.to_thread(container.start)
    await wait_for_log(container, " ready", timeout_s)
    return time.monotonic() - started


@dataclass
class RewardLog:
    """Every reward event on the rewards topic, duplicates included, with arrival times."""

    kafka: KafkaSettings
    events: list[tuple[float, RewardEvent]] = field(default_factory=list)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def count(self) -> int:
        return len({e.sample_id for _, e in self.events})

    def by_worker(self) -> dict[str, int]:
        """First-reward counts per worker_id (who scored each sample first)."""
        first: dict[str, str] = {}
        for _, event in self.events:
            first.setdefault(event.sample_id, event.worker_id)
        counts: dict[str, int] = {}
        for worker in first.values():
            counts[worker] = counts.get(worker, 0) + 1
        return counts

    def duplicates(self) -> int:
        return len(self.events) - self.count()

    async def follow(self, stop: asyncio.Event) -> None:
        consumer = AioClients(self.kafka).consumer(ConsumerOptions())  # no group: every partition
        consumer.subscribe([self.kafka.topics.rewards])
        async with running(consumer):
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for records in batches.values():
                    for record in records:
                        assert record.value is not None
                        self.events.append((time.monotonic(), decode(record.value, RewardEvent)))
                        self._arrived.set()

    async def wait_for(self, count: int, timeout_s: float) -> None:
        async with asyncio.timeout(timeout_s):
            while self.count() < count:
                self._arrived.clear()
                await self._arrived.wait()


async def group_state(kafka: KafkaSettings, group_id: str) -> tuple[str, dict[str, int]]:
    """(state, partitions per member id) of a consumer group."""
    async with broker_state.admin_client(kafka) as admin:
        group = await broker_state.group_state(admin, group_id)
    return group.state, group.owned


async def wait_group(kafka: KafkaSettings, group_id: str, members: int, timeout_s: float) -> float:
    """Monotonic time at which the group was Stable with ``members`` owning every partition."""
    async with asyncio.timeout(timeout_s):
        while True:
            state, owned = await group_state(kafka, group_id)
            if state == "Stable" and len(owned) == members and sum(owned.values()) == PARTITIONS:
                return time.monotonic()
            await asyncio.sleep(0.1)  # the broker is polled, under the deadline


def report(name: str, figures: dict[str, Any]) -> None:
    """Print a measured figure set (pytest -s shows it; docs/containers.md quotes it)."""
    print(f"\n{name}: {json.dumps(figures, sort_keys=True)}")
