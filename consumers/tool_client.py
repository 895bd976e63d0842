"""Run code in a live session on the worker group and wait for what it printed: the tool client.

A multi-turn rollout's tool (verl's ``ToolAgentLoop`` calls one per model turn) runs
cells in a *session* (:mod:`schemas.tools`): each call the session's next sequence
number, all of a session's calls keyed by its id, so they reach the worker that holds
it. Each process runs one :class:`ToolClient`: one publisher (the trainer side's,
:meth:`~producers.RolloutProducer.publish_tool_call`) and one reader of a reply topic
of its own (:class:`~consumers.replies.ReplyInbox`), as the reward client does.

The client keeps each session's accepted cells (statuses in :data:`schemas.ACCEPTED`)
and answers a worker's ``replay_needed`` by sending the call again with them, so the
worker rebuilds the session; a caller never sees ``replay_needed``.

A call that times out leaves the client unsure whether its cell ran. The session's
next call therefore skips a sequence number and carries the history: whichever
worker gets it sees a gap and rebuilds the session from the accepted cells alone, so
the session's state is again exactly what the caller knows of (a late result of the
timed-out call is dropped, counted in ``stats.late``).

Errors: :meth:`ToolClient.run` raises ``TimeoutError`` when no result comes in time,
and :class:`~producers.PublishError` when the broker refuses the call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass, field

import msgspec

from consumers.replies import PerLoopClients, PublishingClient, process_clients
from consumers.reward_client import client_name
from kafkaio import Clients
from producers import ProducerConfig
from schemas import ACCEPTED, KafkaSettings, ToolCall, ToolCell, ToolLimits, ToolResult

__all__ = [
    "SharedToolClients",
    "ToolClient",
    "ToolClientConfig",
    "ToolClientStats",
    "shared_tool_clients",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolClientConfig:
    """One tool client: its reply topic's name, its default timeout and limits, its bounds."""

    name: str = field(default_factory=client_name)
    timeout_s: float = 60.0
    limits: ToolLimits = field(default_factory=ToolLimits)
    # Sessions whose history this process keeps (least recently used forgotten first;
    # a forgotten session that is then called again starts afresh).
    max_sessions: int = 65_536
    # None: min(3, brokers in the cluster).
    reply_replication_factor: int | None = None
    topic_wait_s: float = 30.0
    # A rollout waits on each call: no linger (2 ms of it was a third of a call's round
    # trip at one session; bench_tools.py).
    publisher: ProducerConfig = field(default_factory=lambda: ProducerConfig(linger_ms=0))


@dataclass
class ToolClientStats:
    """What a client sent and gave up on, and what its reply topic brought."""

    calls: int = 0
    replays: int = 0
    timeouts: int = 0
    results: int = 0
    late: int = 0
    undecodable: int = 0


@dataclass
class _Session:
    """A session as its caller knows it: the last seq sent, its accepted cells."""

    seq: int = 0
    history: list[ToolCell] = field(default_factory=list)
    # The last call's outcome is unknown (timed out, refused): the next one rebuilds.
    unsure: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ToolClient(PublishingClient[ToolResult]):
    """Sends tool calls and hands each caller its own call's :class:`~schemas.ToolResult`.

    ``clients`` makes the Kafka clients (default: :class:`~kafkaio.AioClients` for ``kafka``).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        config: ToolClientConfig | None = None,
        *,
        clients: Clients | None = None,
    ) -> None:
        self.config = config = config or ToolClientConfig()
        super().__init__(
            kafka,
            config.name,
            config.publisher,
            ToolResult,
            lambda result: result.call_id,
            clients=clients,
            replication_factor=config.reply_replication_factor,
            topic_wait_s=config.topic_wait_s,
        )
        self._sent = ToolClientStats()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    @property
    def name(self) -> str:
        """The client's name (its reply topic's suffix)."""
        return self.config.name

    @property
    def stats(self) -> ToolClientStats:
        """Its counters now."""
        replies = self._inbox.stats
        return dataclasses.replace(
            self._sent,
            results=replies.delivered,
            late=replies.late,
            undecodable=replies.undecodable,
        )

    # -- calls -----------------------------------------------------------------

    async def run(
        self,
        session_id: str,
        code: str,
        *,
        language: str = "python",
        limits: ToolLimits | None = None,
        stateless: bool = False,
        timeout_s: float | None = None,
    ) -> ToolResult:
        """Run ``code`` as the session's next cell (or, ``stateless`` or not python, as a
        fresh program) and return its result; rebuilds on the worker are transparent.

        Raises ``TimeoutError`` after ``timeout_s`` (default: the config's) without a
        result, and :class:`~producers.PublishError` when the broker refuses the call.
        """
        limits = limits or self.config.limits
        timeout = timeout_s if timeout_s is not None else self.config.timeout_s
        if stateless or language != "python":
            call = self._call(session_id, 1, code, language, limits, stateless=True)
            return await self._timed(self._exchange(call, None), timeout)
        session = self._session(session_id)
        async with session.lock:
            return await self._timed(self._cell(session_id, session, code, limits), timeout)

    async def end(self, session_id: str, *, timeout_s: float | None = None) -> None:
        """End the session on its worker and forget its history (a lost reply is no error:
        the worker's idle TTL ends the session anyway)."""
        session = self._sessions.get(session_id)
        if session is None:
            return
        async with session.lock:
            self._sessions.pop(session_id, None)
            call = self._call(session_id, session.seq + 1, "", "python", self.config.limits)
            call = msgspec.structs.replace(call, end_session=True)
            timeout = timeout_s if timeout_s is not None else self.config.timeout_s
            try:
                await self._timed(self._exchange(call, None), timeout)
            except TimeoutError:
                log.warning("no answer to ending tool session %s", session_id)

    async def _cell(
        self, session_id: str, session: _Session, code: str, limits: ToolLimits
    ) -> ToolResult:
        # After an unsure call, skip a seq and send the history: the worker rebuilds.
        seq = session.seq + (2 if session.unsure else 1)
        call = self._call(session_id, seq, code, "python", limits)
        if session.unsure:
            call = msgspec.structs.replace(call, history=list(session.history))
        session.seq, session.unsure = seq, True
        result = await self._exchange(call, session.history)
        session.unsure = False
        if result.status in ACCEPTED:
            session.history.append(ToolCell(seq=seq, code=code))
        return result

    async def _exchange(self, call: ToolCall, history: list[ToolCell] | None) -> ToolResult:
        """Send ``call`` and wait for its result; on replay_needed send it again with
        ``history``. (A replay_needed after that is a stale answer to the first send,
        from a worker that got it redelivered: the rebuilt result follows it.)"""
        send = True
        while True:
            with self._inbox.waiting(call.call_id) as future:
                if send:
                    await self._publish(call)
                result = await future
            if result.status != "replay_needed" or history is None:
                return result
            send = call.history is None
            if send:
                self._sent.replays += 1
                call = msgspec.structs.replace(call, history=list(history))

    async def _timed(self, work: Awaitable[ToolResult], timeout_s: float) -> ToolResult:
        try:
            async with asyncio.timeout(timeout_s):
                return await work
        except TimeoutError:
            self._sent.timeouts += 1
            raise

    async def _publish(self, call: ToolCall) -> None:
        await self._running().publish_tool_call(call)
        self._sent.calls += 1

    def _call(
        self,
        session_id: str,
        seq: int,
        code: str,
        language: str,
        limits: ToolLimits,
        *,
        stateless: bool = False,
    ) -> ToolCall:
        return ToolCall(
            call_id=uuid.uuid4().hex,
            session_id=session_id,
            seq=seq,
            reply_topic=self.reply_topic,
            language=language,
            code=code,
            stateless=stateless,
            limits=limits,
        )

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = _Session()
            while len(self._sessions) > self.config.max_sessions:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(session_id)
        return session


class SharedToolClients(PerLoopClients[ToolClient]):
    """One started :class:`ToolClient` per event loop of this process, made on first use.

    verl's ``ToolAgentLoop`` makes and releases a tool instance around every call, so
    the client the instances share lives here (how each is stopped with its loop:
    :class:`~consumers.replies.PerLoopClients`).
    """

    def __init__(self, kafka: KafkaSettings, config: ToolClientConfig | None = None) -> None:
        base = config or ToolClientConfig()

        def make(started: int) -> ToolClient:
            suffix = "" if started == 1 else f"-{started}"
            return ToolClient(kafka, dataclasses.replace(base, name=base.name + suffix))

        super().__init__(make)


def shared_tool_clients(
    kafka: KafkaSettings, config: ToolClientConfig | None = None
) -> SharedToolClients:
    """This process's :class:`SharedToolClients` for these settings (made on first use)."""
    return process_clients(
        ("tool-clients", kafka, config), lambda: SharedToolClients(kafka, config)
    )
