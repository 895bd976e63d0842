"""Tool calls end to end: the tool client, the real broker, real worker processes.

Workers are ``tests/integration/tool_worker.py`` (the tool service as ``rewardbus
worker`` runs it): live sessions in the jail (``rewardbus.wiring.build_tool_sessions``),
stateless calls through the jailed executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from consumers.tool_client import ToolClient, ToolClientConfig
from kafkaio import AioClients, ProducerOptions, running
from rewardbus.topics import await_group_members, ensure_topics
from sandbox_workers.service import WorkerConfig
from sandbox_workers.tools.service import ToolConfig, run_tool_service
from schemas import DeadLetter, KafkaSettings, ToolCall, ToolLimits, decode, encode
from tests.support.broker_state import until_committed
from tests.support.reading import end_offsets, read_until
from tests.support.tool_sessions import DictSessions

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# A worker killed -9 is noticed at its session timeout (6 s), then the group rebalances.
FAILOVER_TIMEOUT_S = 90.0


@dataclass
class _Worker:
    worker_id: str
    proc: asyncio.subprocess.Process
    log: Path

    async def stop(self, signum: signal.Signals = signal.SIGTERM) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signum)
        return await asyncio.wait_for(self.proc.wait(), timeout=60)


async def _start_worker(
    kafka: KafkaSettings, worker_id: str, logs: Path, *, max_sessions: int = 100
) -> _Worker:
    log = logs / f"{worker_id}.log"
    argv = [
        sys.executable, str(REPO / "tests" / "integration" / "tool_worker.py"),
        kafka.bootstrap_servers, kafka.topics.prefix, f"{kafka.topics.prefix}workers",
        worker_id, str(max_sessions),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log.open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=err
        )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
    assert b"ready" in line, log.read_text(errors="replace")[-3000:]
    return _Worker(worker_id, proc, log)


@contextlib.asynccontextmanager
async def _workers(
    kafka: KafkaSettings, logs: Path, count: int = 1, *, max_sessions: int = 100
) -> AsyncIterator[list[_Worker]]:
    await ensure_topics(kafka, partitions=4)
    workers: list[_Worker] = []
    try:
        workers = list(
            await asyncio.gather(
                *(
                    _start_worker(kafka, f"w{i}", logs, max_sessions=max_sessions)
                    for i in range(count)
                )
            )
        )
        yield workers
    finally:
        for worker in workers:
            if worker.proc.returncode is None:
                await worker.stop(signal.SIGKILL)


@contextlib.asynccontextmanager
async def _client(kafka: KafkaSettings) -> AsyncIterator[ToolClient]:
    async with ToolClient(kafka, ToolClientConfig(timeout_s=60)) as client:
        yield client


async def test_a_trajectory_of_three_dependent_cells(kafka: KafkaSettings, tmp_path: Path) -> None:
    async with _workers(kafka, tmp_path), _client(kafka) as client:
        session = f"s-{uuid.uuid4().hex[:8]}"
        first = await client.run(session, "import math\nradius = 2")
        second = await client.run(session, "def area(r):\n    return round(math.pi * r * r, 3)")
        third = await client.run(session, "print(area(radius))")
        assert [r.status for r in (first, second, third)] == ["ok", "ok", "ok"]
        assert third.stdout == "12.566\n"
        assert [r.seq for r in (first, second, third)] == [1, 2, 3]
        assert not any(r.rebuilt for r in (first, second, third))
        assert len({r.worker_id for r in (first, second, third)}) == 1
        await client.end(session)
        assert client.stats.replays == 0


async def test_a_cell_that_raises_is_an_error_and_the_session_goes_on(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    async with _workers(kafka, tmp_path), _client(kafka) as client:
        session = f"s-{uuid.uuid4().hex[:8]}"
        await client.run(session, "x = 41")
        raised = await client.run(session, "x += 1\n{}['missing']")
        assert raised.status == "error"
        assert "KeyError: 'missing'" in raised.stderr and "Traceback" in raised.stderr
        after = await client.run(session, "print(x)")
        assert (after.status, after.stdout) == ("ok", "42\n")


async def test_stateless_calls_in_another_language(kafka: KafkaSettings, tmp_path: Path) -> None:
    async with _workers(kafka, tmp_path), _client(kafka) as client:
        session = f"s-{uuid.uuid4().hex[:8]}"
        result = await client.run(session, "console.log(6 * 7)", language="javascript")
        assert (result.status, result.stdout.strip()) == ("ok", "42"), result
        failed = await client.run(session, "throw new Error('nope')", language="javascript")
        assert failed.status == "error" and "nope" in failed.stderr, failed
        cobol = await client.run(session, "DISPLAY 'HI'.", language="cobol")
        assert cobol.status == "rejected" and "cobol" in cobol.message
        python = await client.run(session, "print(1)", stateless=True)
        assert (python.status, python.stdout) == ("ok", "1\n")
        # The whole output up to the call's cap (it was the executor's last 2 KiB).
        lines = "for (let i = 0; i < 1000; i++) console.log(`line ${i}`);"
        long = await client.run(session, lines, language="javascript")
        expected = "".join(f"line {i}\n" for i in range(1000))
        assert (long.status, long.stdout, long.truncated) == ("ok", expected, False)


async def test_a_session_survives_its_worker_killed_9_mid_trajectory(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    async with _workers(kafka, tmp_path, count=2) as workers, _client(kafka) as client:
        await await_group_members(kafka, f"{kafka.topics.prefix}workers.tools", 2)
        session = f"s-{uuid.uuid4().hex[:8]}"
        first = await client.run(session, "total = 0\nitems = []")
        second = await client.run(session, "items.extend(range(10))\ntotal += sum(items)")
        assert (first.status, second.status) == ("ok", "ok")
        assert first.worker_id == second.worker_id
        await _all_calls_committed(kafka)
        holder = next(w for w in workers if w.worker_id == second.worker_id)
        assert await holder.stop(signal.SIGKILL) == -signal.SIGKILL
        third = await client.run(
            session, "total *= 2\nprint(total, len(items))", timeout_s=FAILOVER_TIMEOUT_S
        )
        fourth = await client.run(session, "print(total + 1)", timeout_s=FAILOVER_TIMEOUT_S)
        assert (third.status, third.stdout) == ("ok", "90 10\n"), third
        assert (fourth.status, fourth.stdout) == ("ok", "91\n"), fourth
        assert third.rebuilt and third.rebuild_reason == "not_held" and third.replayed == 2
        assert third.worker_id != holder.worker_id and not fourth.rebuilt
        assert client.stats.replays >= 1


async def test_an_evicted_session_is_rebuilt_on_its_next_call(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    async with _workers(kafka, tmp_path, max_sessions=1), _client(kafka) as client:
        a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
        await client.run(a, "name = 'a'")
        await client.run(b, "name = 'b'")  # the worker holds one: a is evicted
        again = await client.run(a, "print(name)")
        assert (again.status, again.stdout) == ("ok", "a\n")
        assert again.rebuilt and again.rebuild_reason == "evicted" and again.replayed == 1


async def test_a_time_limit_ends_the_session_and_the_next_call_rebuilds_it(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    async with _workers(kafka, tmp_path), _client(kafka) as client:
        session = f"s-{uuid.uuid4().hex[:8]}"
        await client.run(session, "kept = 7")
        looped = await client.run(session, "while True: pass", limits=ToolLimits(time_s=0.5))
        assert looped.status == "time_limit"
        after = await client.run(session, "print(kept)")
        assert (after.status, after.stdout) == ("ok", "7\n")
        assert after.rebuilt and after.rebuild_reason == "ended"


async def _all_calls_committed(kafka: KafkaSettings) -> None:
    """Until the tool service has committed every call on the topic: a worker killed
    then leaves nothing to redeliver (a redelivered seq 1 and 2 would build the session
    again by themselves, and the next call would need no rebuild)."""
    group = f"{kafka.topics.prefix}workers.tools"
    ends = await end_offsets(kafka, kafka.topics.tool_calls)
    await until_committed(kafka, group, ends, what="the tool calls committed", timeout_s=30)


async def _dead_letters(kafka: KafkaSettings, count: int) -> list[DeadLetter]:
    records = await read_until(
        kafka,
        [kafka.topics.dlq],
        lambda read: len(read) >= count,
        what=f"{count} dead letters",
    )
    return [decode(r.value, DeadLetter) for r in records]


async def test_malformed_calls_and_foreign_reply_topics_are_dead_lettered(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    async with _workers(kafka, tmp_path), _client(kafka) as client:
        foreign = ToolCall(
            call_id="c1", session_id="s-foreign", seq=1, reply_topic="rollouts.rewards", code="1"
        )
        producer = AioClients(kafka).producer(ProducerOptions())
        async with running(producer):
            await producer.send_and_wait(kafka.topics.tool_calls, b"\xc1 not msgpack", key=b"s-bad")
            await producer.send_and_wait(kafka.topics.tool_calls, encode(foreign), key=b"s-foreign")
        letters = await _dead_letters(kafka, 2)
        by_key = {letter.key: letter for letter in letters}
        assert by_key[b"s-bad"].error_type == "SchemaError"
        assert by_key[b"s-bad"].source_topic == kafka.topics.tool_calls
        assert by_key[b"s-foreign"].error_type == "InvalidReplyTopic"
        assert "rollouts.rewards" in by_key[b"s-foreign"].reason
        # The worker goes on answering.
        ok = await client.run(f"s-{uuid.uuid4().hex[:8]}", "print('still here')")
        assert ok.stdout == "still here\n"


class _NoPrograms:
    languages: dict[str, str] = {}  # noqa: RUF012

    async def run(
        self, completion: object, suite: object = None, *, output_tail_bytes: int | None = None
    ) -> object:
        raise AssertionError("no stateless call in this test")


async def test_each_call_is_a_span_in_the_callers_trace_with_its_replay(
    kafka: KafkaSettings, span_exporter: InMemorySpanExporter
) -> None:
    await ensure_topics(kafka, partitions=2)
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ready = asyncio.Event()
    service = asyncio.create_task(
        run_tool_service(
            kafka,
            WorkerConfig(group_id=f"{kafka.topics.prefix}workers", worker_id="in-process"),
            ToolConfig(max_sessions=1),
            factory=DictSessions(),
            runner=_NoPrograms(),  # type: ignore[arg-type]
            shutdown=stop,
            ready=ready,
        )
    )
    try:
        await ready.wait()
        tracer = trace.get_tracer(__name__)
        async with _client(kafka) as client:
            with tracer.start_as_current_span("trajectory") as root:
                await client.run("a", "x = 1")
                await client.run("b", "x = 2")  # evicts a
                rebuilt = await client.run("a", "print(x)")
        assert rebuilt.rebuilt and rebuilt.stdout == "1\n"
    finally:
        stop.set_result(None)
        await service
    trace_id = root.get_span_context().trace_id
    spans = span_exporter.get_finished_spans()
    calls = [s for s in spans if s.name == "tool call"]
    assert calls and all(s.context.trace_id == trace_id for s in calls)
    statuses = sorted(str(s.attributes["rewardbus.tool.status"]) for s in calls)  # type: ignore[index]
    assert statuses == ["ok", "ok", "ok", "replay_needed"]
    replay = next(s for s in spans if s.name == "replay tool session")
    parent = next(s for s in calls if s.context.span_id == replay.parent.span_id)  # type: ignore[union-attr]
    assert parent.attributes["rewardbus.tool.rebuilt"] is True  # type: ignore[index]
    assert parent.attributes["rewardbus.session_id"] == "a"  # type: ignore[index]
    cell = next(
        s for s in spans if s.name == "run cell" and s.parent.span_id == parent.context.span_id
    )  # type: ignore[union-attr]
    assert cell.start_time >= replay.end_time  # type: ignore[operator]
    waits = [s for s in spans if s.name == "queue wait" and s.context.trace_id == trace_id]
    assert len(waits) == len(calls)  # one per record


async def test_rewardbus_worker_serves_tool_calls_beside_completions(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    await ensure_topics(kafka, partitions=2)
    argv = [
        sys.executable, "-m", "rewardbus", "worker",
        "--bootstrap-servers", kafka.bootstrap_servers,
        "--topic-prefix", kafka.topics.prefix,
        "--group-id", f"{kafka.topics.prefix}workers",
        "--worker-id", "cli", "--result-cache-mb", "0",
        "--max-tool-sessions", "3", "--tool-concurrency", "2",
    ]  # fmt: skip
    log = tmp_path / "cli.log"
    with log.open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=err
        )
    worker = _Worker("cli", proc, log)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
        assert b"ready" in line, log.read_text(errors="replace")[-3000:]
        async with _client(kafka) as client:
            result = await client.run("s", "console.log('from the worker')", language="js")
        assert (result.status, result.stdout, result.worker_id) == (
            "ok",
            "from the worker\n",
            "cli",
        ), result
    finally:
        assert await worker.stop() == 0, log.read_text(errors="replace")[-3000:]
