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
import atexit
import contextlib
import dataclasses
import logging
import os
import socket
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Hashable
from dataclasses import dataclass, field

import msgspec

from kafkaio import (
    AioClients,
    Clients,
    Consumer,
    ConsumerOptions,
    KafkaIOError,
    Lifecycle,
    TopicPartition,
    ensure_topic,
    reply_topic_spec,
    running,
)
from producers import ProducerConfig, RolloutProducer
from schemas import (
    Completion,
    KafkaSettings,
    ProblemRecord,
    RewardEvent,
    SchemaError,
    decode,
)

__all__ = [
    "RewardClient",
    "RewardClientConfig",
    "RewardClientStats",
    "SharedRewardClients",
    "process_clients",
]

log = logging.getLogger(__name__)


def _publisher_config() -> ProducerConfig:
    # Each caller waits on its own sample's publish: linger less than a trainer's batch does.
    return ProducerConfig(linger_ms=2)


def _client_name() -> str:
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class RewardClientConfig:
    """One reward client: its reply topic's name and replication, its bounds."""

    name: str = field(default_factory=_client_name)
    max_in_flight: int = 4096
    # None: min(3, brokers in the cluster).
    reply_replication_factor: int | None = None
    # Suites this process remembers having published (least recent forgotten first).
    max_problems_remembered: int = 65_536
    topic_wait_s: float = 30.0
    publisher: ProducerConfig = field(default_factory=_publisher_config)


@dataclass
class RewardClientStats:
    """What a client sent, got back, and gave up on."""

    published: int = 0
    problems_published: int = 0
    rewards: int = 0
    timeouts: int = 0
    late_rewards: int = 0
    undecodable: int = 0


class RewardClient(Lifecycle):
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
        self._kafka = kafka
        self._clients = clients or AioClients(kafka)
        self.config = config or RewardClientConfig()
        self.reply_topic = kafka.topics.reply_topic(self.config.name)
        self.stats = RewardClientStats()
        self._publisher: RolloutProducer | None = None
        self._consumer: Consumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[str, asyncio.Future[RewardEvent]] = {}
        self._problems: OrderedDict[str, asyncio.Future[None]] = OrderedDict()
        self._slots = asyncio.Semaphore(self.config.max_in_flight)

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Create the reply topic, start reading it from its start, connect the publisher."""
        await self._create_reply_topic()
        consumer = self._clients.consumer(ConsumerOptions(fetch_max_wait_ms=100))
        await consumer.start()
        consumer.assign([TopicPartition(self.reply_topic, 0)])
        self._consumer = consumer
        publisher = RolloutProducer(self._kafka, self.config.publisher, clients=self._clients)
        await publisher.start()
        self._publisher = publisher
        self._reader = asyncio.create_task(self._read_replies(consumer))

    async def stop(self) -> None:
        """Fail the waiters, disconnect, delete the reply topic."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(RuntimeError("reward client stopped"))
        self._waiting.clear()
        if self._publisher is not None:
            await self._publisher.stop()
            self._publisher = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
        await self._delete_reply_topic()

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
            self.stats.timeouts += 1
            raise

    async def _score(self, completion: Completion, problem: ProblemRecord | None) -> RewardEvent:
        if completion.sample_id in self._waiting:
            raise ValueError(f"sample {completion.sample_id} is already being scored")
        future: asyncio.Future[RewardEvent] = asyncio.get_running_loop().create_future()
        self._waiting[completion.sample_id] = future
        try:
            if problem is not None:
                await self._ensure_problem(problem)
            await self._publish(msgspec.structs.replace(completion, reply_topic=self.reply_topic))
            return await future
        finally:
            self._waiting.pop(completion.sample_id, None)

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
        self.stats.problems_published += 1

    async def _publish(self, completion: Completion) -> None:
        await self._running().publish(completion)
        self.stats.published += 1

    async def _read_replies(self, consumer: Consumer) -> None:
        while True:
            try:
                fetched = await consumer.getmany(timeout_ms=500)
            except KafkaIOError as exc:  # a broker hiccup: the consumer reconnects by itself
                log.warning("reading %s failed: %s", self.reply_topic, exc.reason)
                await asyncio.sleep(0.5)
                continue
            for records in fetched.values():
                for record in records:
                    self._deliver(record.value)

    def _deliver(self, value: bytes | None) -> None:
        try:
            event = decode(value, RewardEvent)
        except SchemaError as exc:
            self.stats.undecodable += 1
            log.error("undecodable reply on %s: %s", self.reply_topic, exc.reason)  # noqa: TRY400
            return
        future = self._waiting.get(event.sample_id)
        if future is None or future.done():
            self.stats.late_rewards += 1  # its caller timed out, or a redelivered duplicate
            return
        self.stats.rewards += 1
        future.set_result(event)

    # -- the reply topic -------------------------------------------------------

    async def _create_reply_topic(self) -> None:
        admin = self._clients.admin()
        async with running(admin):
            replication = self.config.reply_replication_factor
            if replication is None:
                replication = min(3, max(1, await admin.broker_count()))
            spec = reply_topic_spec(self.reply_topic, replication)
            await ensure_topic(admin, spec, timeout_s=self.config.topic_wait_s)

    async def _delete_reply_topic(self) -> None:
        try:
            await _delete_topics(self._clients, [self.reply_topic])
        except KafkaIOError as exc:  # retention empties it anyway
            log.warning("could not delete reply topic %s: %s", self.reply_topic, exc.reason)
        else:
            log.info("deleted reply topic %s", self.reply_topic)

    @property
    def running(self) -> bool:
        """Started and not stopped."""
        return self._publisher is not None

    def _running(self) -> RolloutProducer:
        if self._publisher is None:
            raise RuntimeError("RewardClient is not started (use start() or async with)")
        return self._publisher


class SharedRewardClients:
    """One started :class:`RewardClient` per event loop of this process, made on first use.

    verl builds reward managers per Ray actor and calls ``compute_score`` as a plain
    function, so the client they share has to live beside them, not inside one of
    them. Kafka clients belong to the loop that started them, hence one per loop.

    Each client is stopped (its reply topic deleted) before its loop goes away:
    when the loop shuts down its async generators (``asyncio.run`` does, before it
    closes the loop), or at exit for a loop still open then (a Ray actor's loop,
    running in its own thread, or verl's ``get_event_loop()``, never closed). A
    process killed outright leaves its reply topic to retention.
    """

    def __init__(self, kafka: KafkaSettings, config: RewardClientConfig | None = None) -> None:
        self._kafka = kafka
        self._config = config or RewardClientConfig()
        self._clients: dict[asyncio.AbstractEventLoop, asyncio.Future[RewardClient]] = {}
        # Per loop: the async generator whose closing stops that loop's client.
        self._stoppers: dict[asyncio.AbstractEventLoop, AsyncGenerator[None, None]] = {}
        self._exit_hook = False
        self._started = 0

    async def get(self) -> RewardClient:
        """This loop's client, started (concurrent first callers share one start)."""
        loop = asyncio.get_running_loop()
        for stale in [other for other in self._clients if other.is_closed()]:
            await self._forget_closed(stale)
        starting = self._clients.get(loop)
        if starting is None or (starting.done() and starting.exception() is not None):
            starting = self._clients[loop] = asyncio.ensure_future(self._start())
        return await asyncio.shield(starting)

    async def aclose(self) -> None:
        """Stop this loop's client (deleting its reply topic); the next ``get`` starts anew."""
        loop = asyncio.get_running_loop()
        self._clients.pop(loop, None)
        stopper = self._stoppers.pop(loop, None)
        if stopper is not None:
            await stopper.aclose()

    async def _start(self) -> RewardClient:
        self._started += 1
        suffix = "" if self._started == 1 else f"-{self._started}"
        config = dataclasses.replace(self._config, name=self._config.name + suffix)
        client = RewardClient(self._kafka, config)
        await client.start()
        # Started here, the generator belongs to this loop: the loop's
        # shutdown_asyncgens() closes it, and closing it stops the client.
        stopper = _stopped_with_its_loop(client)
        await anext(stopper)
        self._stoppers[asyncio.get_running_loop()] = stopper
        if not self._exit_hook:
            atexit.register(self._stop_open_loops_clients)
            self._exit_hook = True
        return client

    async def _forget_closed(self, loop: asyncio.AbstractEventLoop) -> None:
        """Drop the client of a loop closed without shutting its async generators down.

        Its Kafka connections went with that loop and cannot be closed from this
        one; its reply topic can still be deleted.
        """
        starting = self._clients.pop(loop)
        self._stoppers.pop(loop, None)
        if starting.done() and not starting.cancelled() and starting.exception() is None:
            client = starting.result()
            if client.running:
                log.warning(
                    "event loop closed with reward client %s running (close loops with "
                    "asyncio.run or shutdown_asyncgens() to stop it cleanly)",
                    client.config.name,
                )
                await client._delete_reply_topic()

    def _stop_open_loops_clients(self) -> None:
        """At exit: stop the clients of loops still open, each on its own loop."""
        for loop, stopper in list(self._stoppers.items()):
            if loop.is_closed():
                continue
            closing = asyncio.wait_for(stopper.aclose(), _STOP_AT_EXIT_S)
            try:
                if loop.is_running():  # another thread's loop (a Ray actor's)
                    asyncio.run_coroutine_threadsafe(closing, loop).result(_STOP_AT_EXIT_S + 1)
                else:
                    loop.run_until_complete(closing)
            except Exception as exc:  # noqa: BLE001  # best effort at exit; retention is the backstop
                log.warning("reward client not stopped at exit: %r", exc)
        self._stoppers.clear()
        self._clients.clear()


# A client's stop at exit: a producer flush, two disconnects and a topic deletion.
_STOP_AT_EXIT_S = 10.0


async def _stopped_with_its_loop(client: RewardClient) -> AsyncGenerator[None, None]:
    """Waits, suspended, to be closed (by its loop's shutdown_asyncgens); then stops ``client``."""
    try:
        yield
    finally:
        if client.running:
            await client.stop()


async def _delete_topics(clients: Clients, topics: list[str]) -> None:
    admin = clients.admin()
    async with running(admin):
        await admin.delete_topics(topics)


# Process-wide, by design: verl calls a custom compute_score as a plain function
# (loading its file as a second copy of the module, by path) and builds managers
# per actor, so the clients they share live here, in a module imported once.
_PROCESS_CLIENTS: dict[Hashable, SharedRewardClients] = {}


def process_clients(key: Hashable, make: Callable[[], SharedRewardClients]) -> SharedRewardClients:
    """This process's clients for ``key`` (settings), made by ``make`` the first time."""
    shared = _PROCESS_CLIENTS.get(key)
    if shared is None:
        shared = _PROCESS_CLIENTS[key] = make()
    return shared
