"""A whole pipeline on one machine: broker, worker processes, aggregator, reward watcher.

The demo and the benchmarks share these pieces; each is an async context
manager that stops what it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from consumers import AggregatorConfig, run_aggregator
from kafkaio import (
    AioClients,
    Consumer,
    ConsumerOptions,
    Record,
    assign_from,
    topic_partitions,
)
from rewardbus.runtime.reaped_child import parent_death_signal
from rewardbus.topics import await_group_members, ensure_topics
from schemas import KafkaSettings, RewardEvent, SchemaError, decode

__all__ = [
    "RewardWatcher",
    "WorkerPoolOptions",
    "aggregator",
    "embedded_broker",
    "stop_processes",
    "worker_pool",
]


@contextlib.asynccontextmanager
async def embedded_broker(
    num_partitions: int = 4, *, preallocate_heap: bool = False, data_dir: Path | None = None
) -> AsyncIterator[str]:
    """A real single-node Kafka broker on 127.0.0.1; yields its bootstrap address.

    ``data_dir``: keep the broker's data there (and find it there on the next start);
    None is a temporary directory removed on stop.
    """
    from rewardbus.runtime.broker import BrokerConfig, EmbeddedBroker

    config = BrokerConfig(
        num_partitions=num_partitions, preallocate_heap=preallocate_heap, data_dir=data_dir
    )
    async with EmbeddedBroker(config) as broker:
        yield broker.bootstrap_servers


@dataclass(frozen=True)
class WorkerPoolOptions:
    """How many sandbox worker processes, and how they run."""

    workers: int
    group_id: str
    log_dir: Path
    strict: bool = True
    concurrency: int = 1
    # Pin worker i to CPU cpus[i]: each worker gets one core's budget.
    cpus: Sequence[int] | None = None
    extra_args: Sequence[str] = ()
    worker_id_prefix: str = "worker"
    # The workers' environment (None: this process's).
    env: Mapping[str, str] | None = None


@contextlib.asynccontextmanager
async def worker_pool(
    kafka: KafkaSettings, options: WorkerPoolOptions
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """Sandbox workers as separate processes, as in production; stopped with SIGTERM."""
    procs: list[asyncio.subprocess.Process] = []
    with contextlib.ExitStack() as logs:
        try:
            for index in range(options.workers):
                log = logs.enter_context((options.log_dir / f"worker-{index}.log").open("wb"))
                procs.append(await _spawn_worker(kafka, options, index, log))
            for index, proc in enumerate(procs):
                await _await_ready(proc, options.log_dir / f"worker-{index}.log")
            await await_group_members(kafka, options.group_id, options.workers)
            yield procs
        finally:
            await stop_processes(procs)


async def _spawn_worker(
    kafka: KafkaSettings, options: WorkerPoolOptions, index: int, log: object
) -> asyncio.subprocess.Process:
    argv = [
        sys.executable, "-m", "rewardbus", "worker",
        "--bootstrap-servers", kafka.bootstrap_servers,
        "--topic-prefix", kafka.topics.prefix,
        "--group-id", options.group_id,
        "--worker-id", f"{options.worker_id_prefix}-{index}",
        "--concurrency", str(options.concurrency),
        *options.extra_args,
    ]  # fmt: skip
    if not options.strict:
        argv.append("--no-strict")
    cpu = options.cpus[index % len(options.cpus)] if options.cpus else None
    # A worker whose parent died (a trainer killed -9) stops as on SIGTERM: drains,
    # commits and leaves, within its stop deadline, instead of judging for nobody.
    # The loop's thread forks it and lives as long as the pool.
    orphaned = parent_death_signal(signal.SIGTERM)

    def prepare() -> None:
        if orphaned is not None:
            orphaned()
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    return await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=log,  # type: ignore[arg-type]
        preexec_fn=prepare,
        env=None if options.env is None else dict(options.env),
    )


async def _await_ready(proc: asyncio.subprocess.Process, log: Path) -> None:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
    if b"ready" not in line:
        await proc.wait()
        tail = await asyncio.to_thread(log.read_text, errors="replace")
        raise RuntimeError(
            f"sandbox worker failed to start (status {proc.returncode}):\n{tail[-3000:]}"
        )


async def stop_processes(procs: Sequence[asyncio.subprocess.Process]) -> None:
    """SIGTERM each, then wait (40 s each at most, then SIGKILL): a worker drains first."""
    for proc in procs:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            await asyncio.wait_for(proc.wait(), timeout=40)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def aggregator(kafka: KafkaSettings, group_id: str) -> AsyncIterator[None]:
    """The stream aggregator as a task of this process, until the block exits."""
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ready = asyncio.Event()
    task = asyncio.create_task(
        run_aggregator(kafka, AggregatorConfig(group_id=group_id), shutdown=stop, ready=ready)
    )
    waiter = asyncio.ensure_future(ready.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiter.cancel()
        task.result()  # raises the aggregator's start-up error
    try:
        yield
    finally:
        stop.set_result(None)
        await asyncio.wait_for(task, timeout=30)


async def local_pipeline(
    stack: contextlib.AsyncExitStack,
    kafka: KafkaSettings,
    *,
    workers: int,
    strict: bool,
    group_id: str,
    worker_id_prefix: str,
    aggregator_group: str,
    partitions: int,
    env: Mapping[str, str] | None = None,
) -> None:
    """A run's own topics, sandbox worker processes (their logs in a temporary
    directory, ``env`` their environment, None: this process's) and aggregator, all
    stopped with ``stack``."""
    await ensure_topics(kafka, partitions=partitions)
    prefix = f"rewardbus-{worker_id_prefix}-"
    logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
    pool = WorkerPoolOptions(
        workers=workers,
        group_id=group_id,
        log_dir=logs,
        strict=strict,
        worker_id_prefix=worker_id_prefix,
        env=env,
    )
    await stack.enter_async_context(worker_pool(kafka, pool))
    await stack.enter_async_context(aggregator(kafka, aggregator_group))


# The rewards topic may still be being created (by the worker, or a topics job).
_TOPIC_WAIT_S = 60.0


@dataclass
class RewardWatcher:
    """Reads the rewards topic and records when each sample's first reward arrived.

    By default every reward is fetched as soon as it is written and dated on
    arrival (``time.monotonic()``): what a latency measurement needs. With
    ``lazy=True`` fetches wait up to 100 ms to batch, and each reward is dated
    by its record timestamp (the worker's produce time) mapped onto the
    monotonic clock: a throughput measurement then costs the broker one fetch
    per 100 ms instead of one per reward.

    It reads every partition from the beginning, or with ``from_end=True`` only
    what is written once it has started (a run on a deployment's long-lived topics:
    the positions are resolved before ``__aenter__`` returns, so nothing produced
    after that is missed, and nothing before it is read).
    """

    kafka: KafkaSettings
    lazy: bool = False
    # Only samples whose id starts with this count (a run's own, on shared topics).
    sample_prefix: str = ""
    from_end: bool = False
    rewards: dict[str, RewardEvent] = field(default_factory=dict)
    arrived_at: dict[str, float] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RewardWatcher:
        clients = AioClients(self.kafka)
        topic = self.kafka.topics.rewards
        partitions = await topic_partitions(clients, topic, timeout_s=_TOPIC_WAIT_S, poll_s=0.1)
        options = ConsumerOptions(
            from_beginning=not self.from_end,
            fetch_max_wait_ms=100 if self.lazy else None,
            fetch_min_bytes=1 << 20 if self.lazy else None,
        )
        consumer = clients.consumer(options)
        await consumer.start()
        try:
            await assign_from(consumer, partitions, from_beginning=not self.from_end)
        except BaseException:
            await consumer.stop()
            raise
        self._task = asyncio.create_task(self._follow(consumer))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self, consumer: Consumer) -> None:
        try:
            while True:
                fetched = await consumer.getmany(timeout_ms=1000)
                for records in fetched.values():
                    for record in records:
                        self._record(record)
        finally:
            await consumer.stop()

    def _record(self, record: Record) -> None:
        try:
            event = decode(record.value or b"", RewardEvent)
        except SchemaError:
            return
        if event.sample_id.startswith(self.sample_prefix) and (event.sample_id not in self.rewards):
            self.rewards[event.sample_id] = event
            self.arrived_at[event.sample_id] = self._dated(record.timestamp_ms)
            self._changed.set()

    def _dated(self, record_ms: int) -> float:
        now = time.monotonic()
        if not self.lazy:
            return now
        return now - max(0.0, time.time() - record_ms / 1000)

    async def changed(self) -> None:
        """Wait until at least one new reward arrived."""
        self._changed.clear()
        await self._changed.wait()

    async def wait_for(self, count: int, timeout_s: float) -> None:
        """Wait until ``count`` distinct samples have rewards."""
        async with asyncio.timeout(timeout_s):
            while len(self.rewards) < count:
                await self.changed()
