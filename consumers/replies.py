"""What every waiting client of this process shares: its own reply topic, and one client per loop.

A client that publishes work and waits on each answer (the reward client, the tool
client) reads a reply topic of its own (``Topics.reply_topic``: one partition,
created at start, deleted at stop), to which the workers send that client's answers.
:class:`ReplyInbox` is that topic: it reads it from its start and hands each decoded
reply to the future waiting on its id; a reply nobody waits on (its caller timed
out, a redelivered duplicate) is counted as late and dropped.

:class:`PublishingClient` is what such a client is around its own work: the
trainer-side publisher (:class:`~producers.RolloutProducer`) plus its inbox, started
and stopped together.

:class:`PerLoopClients` keeps one started client per event loop of the process (Kafka
clients belong to the loop that started them) and stops each before its loop goes
away; :func:`process_clients` keeps such sharers process-wide, by settings.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

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
from schemas import KafkaSettings, SchemaError, decode

__all__ = [
    "PerLoopClients",
    "PublishingClient",
    "ReplyClient",
    "ReplyInbox",
    "ReplyStats",
    "delete_topics",
    "process_clients",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class ReplyStats:
    """What a reply topic brought: replies handed to a waiter, late ones, undecodable ones."""

    delivered: int = 0
    late: int = 0
    undecodable: int = 0


class ReplyInbox(Lifecycle, Generic[T]):
    """This process's reply topic ``topic``: replies of type ``message_type``, by ``id_of``."""

    def __init__(
        self,
        clients: Clients,
        topic: str,
        message_type: type[T],
        id_of: Callable[[T], str],
        *,
        replication_factor: int | None = None,
        topic_wait_s: float = 30.0,
    ) -> None:
        self._clients = clients
        self.topic = topic
        self._type = message_type
        self._id_of = id_of
        self._replication = replication_factor  # None: min(3, brokers in the cluster)
        self._topic_wait_s = topic_wait_s
        self.stats = ReplyStats()
        self._consumer: Consumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[str, asyncio.Future[T]] = {}

    async def start(self) -> None:
        """Create the topic and start reading it from its start."""
        await self._create_topic()
        consumer = self._clients.consumer(ConsumerOptions(fetch_max_wait_ms=100))
        await consumer.start()
        consumer.assign([TopicPartition(self.topic, 0)])
        self._consumer = consumer
        self._reader = asyncio.create_task(self._read(consumer))

    async def stop(self) -> None:
        """Fail the waiters, stop reading, delete the topic."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(RuntimeError(f"the reader of {self.topic} stopped"))
        self._waiting.clear()
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
        await self.delete_topic()

    @contextlib.contextmanager
    def waiting(self, reply_id: str) -> Iterator[asyncio.Future[T]]:
        """A future for the reply ``reply_id``, waited on within the ``with`` only."""
        if reply_id in self._waiting:
            raise ValueError(f"a reply {reply_id} is already awaited")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting[reply_id] = future
        try:
            yield future
        finally:
            if self._waiting.get(reply_id) is future:
                del self._waiting[reply_id]

    async def _read(self, consumer: Consumer) -> None:
        while True:
            try:
                fetched = await consumer.getmany(timeout_ms=500)
            except KafkaIOError as exc:  # a broker hiccup: the consumer reconnects by itself
                log.warning("reading %s failed: %s", self.topic, exc.reason)
                await asyncio.sleep(0.5)
                continue
            for records in fetched.values():
                for record in records:
                    self._deliver(record.value)

    def _deliver(self, value: bytes | None) -> None:
        try:
            reply = decode(value, self._type)
        except SchemaError as exc:
            self.stats.undecodable += 1
            log.error("undecodable reply on %s: %s", self.topic, exc.reason)  # noqa: TRY400
            return
        future = self._waiting.get(self._id_of(reply))
        if future is None or future.done():
            self.stats.late += 1  # its caller timed out, or a redelivered duplicate
            return
        self.stats.delivered += 1
        future.set_result(reply)

    async def _create_topic(self) -> None:
        admin = self._clients.admin()
        async with running(admin):
            replication = self._replication
            if replication is None:
                replication = min(3, max(1, await admin.broker_count()))
            spec = reply_topic_spec(self.topic, replication)
            await ensure_topic(admin, spec, timeout_s=self._topic_wait_s)

    async def delete_topic(self) -> None:
        """Delete the topic (retention empties it anyway if this fails)."""
        try:
            await delete_topics(self._clients, [self.topic])
        except KafkaIOError as exc:
            log.warning("could not delete reply topic %s: %s", self.topic, exc.reason)
        else:
            log.info("deleted reply topic %s", self.topic)


async def delete_topics(clients: Clients, topics: list[str]) -> None:
    """Delete ``topics`` (one that does not exist is no error)."""
    admin = clients.admin()
    async with running(admin):
        await admin.delete_topics(topics)


class PublishingClient(Lifecycle, Generic[T]):
    """Publishes through the trainer-side publisher and waits on replies of type
    ``message_type`` (by ``id_of``) on a reply topic named for ``name``.

    ``clients`` makes the Kafka clients (default: :class:`~kafkaio.AioClients` for ``kafka``).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        name: str,
        publisher: ProducerConfig,
        message_type: type[T],
        id_of: Callable[[T], str],
        *,
        clients: Clients | None,
        replication_factor: int | None,
        topic_wait_s: float,
    ) -> None:
        self._kafka = kafka
        self._clients = clients or AioClients(kafka)
        self._publisher_config = publisher
        self._publisher: RolloutProducer | None = None
        self.reply_topic = kafka.topics.reply_topic(name)
        self._inbox = ReplyInbox(
            self._clients,
            self.reply_topic,
            message_type,
            id_of,
            replication_factor=replication_factor,
            topic_wait_s=topic_wait_s,
        )

    @property
    def running(self) -> bool:
        """Started and not stopped."""
        return self._publisher is not None

    async def start(self) -> None:
        """Create the reply topic, start reading it from its start, connect the publisher."""
        await self._inbox.start()
        publisher = RolloutProducer(self._kafka, self._publisher_config, clients=self._clients)
        try:
            await publisher.start()
        except BaseException:
            await self._inbox.stop()
            raise
        self._publisher = publisher

    async def stop(self) -> None:
        """Fail the waiters, disconnect, delete the reply topic."""
        if self._publisher is not None:
            await self._publisher.stop()
            self._publisher = None
        await self._inbox.stop()

    async def delete_reply_topic(self) -> None:
        """Delete the reply topic (for a client whose loop closed under it)."""
        await self._inbox.delete_topic()

    def _running(self) -> RolloutProducer:
        if self._publisher is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._publisher


class ReplyClient(Protocol):
    """A client :class:`PerLoopClients` can share: started, stopped, its reply topic deletable."""

    @property
    def name(self) -> str: ...

    @property
    def running(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def delete_reply_topic(self) -> None: ...


C = TypeVar("C", bound=ReplyClient)


class PerLoopClients(Generic[C]):
    """One started client per event loop of this process, made on first use by ``make(n)``
    (``n``: how many this sharer has started, from 1, so that each can have its own name).

    Kafka clients belong to the loop that started them, hence one per loop. Each
    client is stopped (its reply topic deleted) before its loop goes away: when the
    loop shuts its async generators down (``asyncio.run`` does, before it closes the
    loop), or at exit for a loop still open then (a Ray actor's loop, running in its
    own thread, or verl's ``get_event_loop()``, never closed). A process killed
    outright leaves its reply topics to retention.
    """

    def __init__(self, make: Callable[[int], C]) -> None:
        self._make = make
        self._clients: dict[asyncio.AbstractEventLoop, asyncio.Future[C]] = {}
        # Per loop: the async generator whose closing stops that loop's client.
        self._stoppers: dict[asyncio.AbstractEventLoop, AsyncGenerator[None, None]] = {}
        self._exit_hook = False
        self._started = 0

    async def get(self) -> C:
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

    async def _start(self) -> C:
        self._started += 1
        client = self._make(self._started)
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
                    "event loop closed with client %s running (close loops with "
                    "asyncio.run or shutdown_asyncgens() to stop it cleanly)",
                    client.name,
                )
                await client.delete_reply_topic()

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
                log.warning("client not stopped at exit: %r", exc)
        self._stoppers.clear()
        self._clients.clear()


# A client's stop at exit: a producer flush, two disconnects and a topic deletion.
_STOP_AT_EXIT_S = 10.0


async def _stopped_with_its_loop(client: ReplyClient) -> AsyncGenerator[None, None]:
    """Waits, suspended, to be closed (by its loop's shutdown_asyncgens); then stops ``client``."""
    try:
        yield
    finally:
        if client.running:
            await client.stop()


S = TypeVar("S")

# Process-wide, by design: verl calls a custom compute_score as a plain function
# (loading its file as a second copy of the module, by path) and builds managers and
# tools per actor, so the clients they share live here, in a module imported once.
_PROCESS_CLIENTS: dict[Hashable, object] = {}


def process_clients(key: Hashable, make: Callable[[], S]) -> S:
    """This process's sharer for ``key`` (settings), made by ``make`` the first time."""
    shared = _PROCESS_CLIENTS.get(key)
    if shared is None:
        shared = _PROCESS_CLIENTS[key] = make()
    return shared  # type: ignore[return-value]  # the key's maker made it
