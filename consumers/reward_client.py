"""Score one completion and wait for its reward: the client a trainer's reward step uses.

verl's reward loop asks for one sample's reward at a time (``run_single``), from
several processes at once (``reward.num_workers``, 8 by default). Each process
runs one :class:`RewardClient`: one trainer-side publisher
(:class:`~producers.RolloutProducer`: the same partitioning, headers and
``publish completion`` span as a trainer's completions), and one reader of a reply topic of
its own (``Topics.reply_topic``: one partition, created at start, deleted at
stop), which the workers send this client's rewards to instead of the shared
rewards topic. So a process reads exactly its own rewards, and what it costs the
broker is one single-partition topic and one fetch session per process.

Each suite is published once per process to the compacted problems topic; the
completions that share it (a GRPO group) only name it.

Errors: none of its own. :meth:`RewardClient.score` raises ``TimeoutError`` when
the reward does not come in time, and the publisher's :class:`~producers.PublishError`
when the broker refuses a publish; :meth:`RewardClient.start` raises that too (the
publisher cannot connect), or the seam's :class:`~kafkaio.KafkaIOError` (the reply
topic cannot be made or read). The caller decides what a sample without a reward scores.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

import msgspec

from consumers import replies
from consumers.replies import PerLoopClients, PublishingClient, process_clients
from kafkaio import Clients
from producers import ProducerConfig
from schemas import Completion, KafkaSettings, ProblemRecord, RewardEvent

__all__ = [
    "RewardClient",
    "RewardClientConfig",
    "RewardClientStats",
    "SharedRewardClients",
    "process_clients",
]

log = logging.getLogger(__name__)


def publisher_config() -> ProducerConfig:
    """A waiting client's publisher settings."""
    # Each caller waits on its own sample's publish: linger less than a trainer's batch does.
    return ProducerConfig(linger_ms=2)


def client_name() -> str:
    """A name for this process's client: host, pid and a random suffix."""
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class RewardClientConfig:
    """One reward client: its reply topic's name and replication, its bounds."""

    name: str = field(default_factory=client_name)
    max_in_flight: int = 4096
    # None: min(3, brokers in the cluster).
    reply_replication_factor: int | None = None
    # Suites this process remembers having published (least recent forgotten first).
    max_problems_remembered: int = 65_536
    topic_wait_s: float = 30.0
    publisher: ProducerConfig = field(default_factory=publisher_config)


@dataclass
class RewardClientStats:
    """What a client sent, got back, and gave up on."""

    published: int = 0
    problems_published: int = 0
    rewards: int = 0
    timeouts: int = 0
    late_rewards: int = 0
    undecodable: int = 0


class RewardClient(PublishingClient[RewardEvent]):
    """Publishes completions and hands each caller its own sample's ``RewardEvent``.

    ``clients`` makes the Kafka clients (default: :class:`~kafkaio.AioClients` for ``kafka``).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        config: RewardClientConfig | None = None,
        *,
        clients: Clients | None = None,
    ) -> None:
        self.config = config = config or RewardClientConfig()
        super().__init__(
            kafka,
            config.name,
            config.publisher,
            RewardEvent,
            lambda event: event.sample_id,
            clients=clients,
            replication_factor=config.reply_replication_factor,
            topic_wait_s=config.topic_wait_s,
        )
        self._sent = RewardClientStats()
        self._problems: OrderedDict[str, asyncio.Future[None]] = OrderedDict()
        self._slots = asyncio.Semaphore(self.config.max_in_flight)

    @property
    def name(self) -> str:
        """The client's name (its reply topic's suffix)."""
        return self.config.name

    @property
    def stats(self) -> RewardClientStats:
        """What it sent, got back, and gave up on, now."""
        replies = self._inbox.stats
        return dataclasses.replace(
            self._sent,
            rewards=replies.delivered,
            late_rewards=replies.late,
            undecodable=replies.undecodable,
        )

    # -- scoring ---------------------------------------------------------------

    async def score(
        self, completion: Completion, problem: ProblemRecord | None, *, timeout_s: float
    ) -> RewardEvent:
        """Publish ``completion`` (and its suite, once) and wait for its reward.

        Raises ``TimeoutError`` if it has not come within ``timeout_s`` seconds
        (counting the wait for an in-flight slot).
        """
        try:
            async with asyncio.timeout(timeout_s), self._slots:
                return await self._score(completion, problem)
        except TimeoutError:
            self._sent.timeouts += 1
            raise

    async def _score(self, completion: Completion, problem: ProblemRecord | None) -> RewardEvent:
        with self._inbox.waiting(completion.sample_id) as future:  # ValueError: already waited
            if problem is not None:
                await self._ensure_problem(problem)
            await self._publish(msgspec.structs.replace(completion, reply_topic=self.reply_topic))
            return await future

    async def _ensure_problem(self, problem: ProblemRecord) -> None:
        """Publish a suite the first time this process needs it; later callers wait on that."""
        published = self._problems.get(problem.problem_id)
        if published is not None:
            self._problems.move_to_end(problem.problem_id)
            if published.done() and published.exception() is not None:
                del self._problems[problem.problem_id]  # the first try failed: try again
            else:
                await asyncio.shield(published)
                return
        published = asyncio.ensure_future(self._publish_problem(problem))
        self._problems[problem.problem_id] = published
        while len(self._problems) > self.config.max_problems_remembered:
            self._problems.popitem(last=False)
        await asyncio.shield(published)

    async def _publish_problem(self, problem: ProblemRecord) -> None:
        await self._running().publish_problem(problem)
        self._sent.problems_published += 1

    async def _publish(self, completion: Completion) -> None:
        await self._running().publish(completion)
        self._sent.published += 1


# The process-wide sharers (consumers.replies keeps them; tests reset them here).
_PROCESS_CLIENTS = replies._PROCESS_CLIENTS


class SharedRewardClients(PerLoopClients[RewardClient]):
    """One started :class:`RewardClient` per event loop of this process, made on first use.

    verl builds reward managers per Ray actor and calls ``compute_score`` as a plain
    function, so the client they share has to live beside them, not inside one of
    them. How each is stopped with its loop: :class:`~consumers.replies.PerLoopClients`.
    """

    def __init__(self, kafka: KafkaSettings, config: RewardClientConfig | None = None) -> None:
        base = config or RewardClientConfig()

        def make(started: int) -> RewardClient:
            suffix = "" if started == 1 else f"-{started}"
            return RewardClient(kafka, dataclasses.replace(base, name=base.name + suffix))

        super().__init__(make)
