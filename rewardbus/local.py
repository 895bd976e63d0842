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
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer

from consumers import AggregatorConfig, run_aggregator
from rewardbus.topics import await_group_members
from schemas import KafkaSettings, RewardEvent, SchemaError, decode

__all__ = ["RewardWatcher", "WorkerPoolOptions", "aggregator", "embedded_broker", "worker_pool"]


@contextlib.asynccontextmanager
async def embedded_broker(num_partitions: int = 4) -> AsyncIterator[str]:
    """A real single-node Kafka broker on 127.0.0.1; yields its bootstrap address."""
    from rewardbus.broker import BrokerConfig, EmbeddedBroker

    async with EmbeddedBroker(BrokerConfig(num_partitions=num_partitions)) as broker:
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
            await _stop(procs)


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

    def pin() -> None:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    return await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=log,  # type: ignore[arg-type]
        preexec_fn=pin if cpu is not None else None,
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


async def _stop(procs: list[asyncio.subprocess.Process]) -> None:
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


@dataclass
class RewardWatcher:
    """Reads the rewards topic and records when each sample's first reward arrived.

    By default every reward is fetched as soon as it is written and dated on
    arrival (``time.monotonic()``): what a latency measurement needs. With
    ``lazy=True`` fetches wait up to 100 ms to batch, and each reward is dated
    by its record timestamp (the worker's produce time) mapped onto the
    monotonic clock: a throughput measurement then costs the broker one fetch
    per 100 ms instead of one per reward.
    """

    kafka: KafkaSettings
    lazy: bool = False
    rewards: dict[str, RewardEvent] = field(default_factory=dict)
    arrived_at: dict[str, float] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RewardWatcher:
        batching = {"fetch_max_wait_ms": 100, "fetch_min_bytes": 1 << 20} if self.lazy else {}
        consumer = AIOKafkaConsumer(
            self.kafka.topics.rewards,
            **self.kafka.client_kwargs(),
            auto_offset_reset="earliest",
            **batching,
        )
        await consumer.start()
        self._task = asyncio.create_task(self._follow(consumer))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        try:
            async for record in consumer:
                try:
                    event = decode(record.value, RewardEvent)
                except SchemaError:
                    continue
                if event.sample_id not in self.rewards:
                    self.rewards[event.sample_id] = event
                    self.arrived_at[event.sample_id] = self._dated(record.timestamp)
                    self._changed.set()
        finally:
            await consumer.stop()

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
