"""The tool client against the tool service, both on the in-memory broker.

Sessions are :class:`tests.support.tool_sessions.DictSession` s; a cell containing
``hold()`` waits until the test releases it, so a call can time out on the client
while the worker still runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from consumers.tool_client import ToolClient, ToolClientConfig
from kafkaio import FakeBroker
from sandbox_workers.service import WorkerConfig
from sandbox_workers.tools import CellResult, LiveSession, SessionLimits
from sandbox_workers.tools.service import ToolConfig, run_tool_service
from schemas import Completion, DeadLetter, KafkaSettings, RewardEvent, TestSuite, Topics, decode
from tests.support.poll import until
from tests.support.tool_sessions import DictSession


class _HeldSessions:
    """DictSessions whose ``hold()`` cells wait for :attr:`release`."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[DictSession] = []

    async def start_session(self, limits: SessionLimits) -> LiveSession:
        session = _HeldSession(limits, self.release)
        self.started.append(session)
        return session


class _HeldSession(DictSession):
    def __init__(self, limits: SessionLimits, release: asyncio.Event) -> None:
        super().__init__(limits)
        self._release = release

    async def run_cell(self, code: str, *, time_s: float, output_bytes: int) -> CellResult:
        if "hold()" in code:
            await self._release.wait()
            code = code.replace("hold()", "pass")
        return await super().run_cell(code, time_s=time_s, output_bytes=output_bytes)


class _NoPrograms:
    languages: dict[str, str] = {}  # noqa: RUF012

    async def run(
        self,
        completion: Completion,
        suite: TestSuite | None = None,
        *,
        output_tail_bytes: int | None = None,
    ) -> RewardEvent:
        raise AssertionError("no stateless call here")


@pytest.fixture
def kafka() -> KafkaSettings:
    return KafkaSettings("fake:9092", topics=Topics(prefix="unit."))


@pytest.fixture
def broker(kafka: KafkaSettings) -> FakeBroker:
    broker = FakeBroker(partitions=2)
    for topic in kafka.topics.all():
        broker.create_topic(topic)
    return broker


@asynccontextmanager
async def _service(
    broker: FakeBroker,
    kafka: KafkaSettings,
    sessions: _HeldSessions,
    max_sessions: int = 10,
    worker_id: str = "w0",
) -> AsyncIterator[None]:
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ready = asyncio.Event()
    task = asyncio.create_task(
        run_tool_service(
            kafka,
            WorkerConfig(group_id="g", worker_id=worker_id, commit_interval_s=0.0),
            ToolConfig(max_sessions=max_sessions),
            factory=sessions,
            runner=_NoPrograms(),
            shutdown=stop,
            ready=ready,
            clients=broker,
        )
    )
    await ready.wait()
    try:
        yield
    finally:
        stop.set_result(None)
        await task


@asynccontextmanager
async def _client(broker: FakeBroker, kafka: KafkaSettings) -> AsyncIterator[ToolClient]:
    config = ToolClientConfig(name="c1", timeout_s=5, reply_replication_factor=1)
    async with ToolClient(kafka, config, clients=broker) as client:
        yield client


async def test_a_session_lost_on_the_worker_is_rebuilt_without_the_caller_seeing_it(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    sessions = _HeldSessions()
    async with _service(broker, kafka, sessions, max_sessions=1), _client(broker, kafka) as client:
        await client.run("a", "x = 1")
        await client.run("a", "1 / 0")  # an error is accepted: replayed too
        await client.run("b", "x = 2")
        result = await client.run("a", "print(x)")
    assert (result.status, result.stdout) == ("ok", "1\n")
    assert result.rebuilt and result.rebuild_reason == "evicted" and result.replayed == 2
    assert sessions.started[-1].cells == ["x = 1", "1 / 0", "print(x)"]
    assert client.stats.replays == 1 and client.stats.calls == 5


async def test_after_a_timeout_the_next_call_rebuilds_from_the_accepted_cells(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    sessions = _HeldSessions()
    async with _service(broker, kafka, sessions), _client(broker, kafka) as client:
        await client.run("s", "x = 1")
        with pytest.raises(TimeoutError):
            await client.run("s", "hold()\nx = 99", timeout_s=0.2)
        sessions.release.set()  # the worker runs the cell after all: its result is late
        result = await client.run("s", "print(x)")
    # The caller never saw x = 99 land, so the session is what it knows of.
    assert (result.status, result.stdout) == ("ok", "1\n")
    assert result.seq == 4 and result.rebuilt and result.rebuild_reason == "not_held"
    assert client.stats.timeouts == 1 and client.stats.late == 1
    assert sessions.started[-1].cells == ["x = 1", "print(x)"]


async def test_end_forgets_the_session_and_closes_it_on_the_worker(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    sessions = _HeldSessions()
    async with _service(broker, kafka, sessions), _client(broker, kafka) as client:
        await client.run("s", "x = 1")
        await client.end("s")
        again = await client.run("s", "print('x' in globals())")
    assert again.seq == 1 and again.stdout == "False\n"
    assert sessions.started[0].closed and len(sessions.started) == 2


async def test_a_call_naming_a_foreign_reply_topic_is_dead_lettered(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    from kafkaio import ProducerOptions
    from schemas import ToolCall, encode

    sessions = _HeldSessions()
    async with _service(broker, kafka, sessions), _client(broker, kafka) as client:
        producer = broker.producer(ProducerOptions())
        await producer.start()
        call = ToolCall(call_id="c", session_id="x", seq=1, reply_topic="unit.rollouts.rewards")
        await producer.send_and_wait(kafka.topics.tool_calls, encode(call), key=b"x")
        await producer.send_and_wait(kafka.topics.tool_calls, b"junk", key=b"y")
        await producer.stop()
        ok = await client.run("z", "print(2)")  # the service goes on
        await until(lambda: len(broker.records(kafka.topics.dlq)) == 2, "two dead letters")
    letters = [decode(r.value, DeadLetter) for r in broker.records(kafka.topics.dlq)]
    assert sorted(letter.error_type for letter in letters) == ["InvalidReplyTopic", "SchemaError"]
    assert ok.stdout == "2\n"
    assert not broker.records("unit.rollouts.rewards")


async def test_sessions_of_partitions_that_move_are_closed_and_rebuilt_by_their_new_owner(
    broker: FakeBroker, kafka: KafkaSettings
) -> None:
    first, second = _HeldSessions(), _HeldSessions()
    names = [f"s{n}" for n in range(8)]
    async with _service(broker, kafka, first), _client(broker, kafka) as client:
        for name in names:
            assert (await client.run(name, f"me = {name!r}")).worker_id == "w0"
        async with _service(broker, kafka, second, worker_id="w1"):
            await broker.rebalance("g.tools")
            results = {name: await client.run(name, "print(me)") for name in names}
            closed = {s.namespace["me"] for s in first.started if s.closed}
    moved = {name for name, result in results.items() if result.worker_id == "w1"}
    assert moved and moved != set(names)  # two partitions, two members: one each
    for name, result in results.items():
        assert result.stdout == f"{name}\n"
        assert result.rebuilt == (name in moved)
        assert result.rebuild_reason == ("not_held" if name in moved else "")
    assert closed == moved
