"""The pipeline's stages in the test's own process: a sandbox worker and the aggregator.

Each stage is a start function ``(shutdown, ready) -> awaitable`` (the shape of
``run_worker`` and ``run_aggregator``); :func:`running` runs one as a task until
the block ends::

    async with running(aggregator(kafka)), running(worker(kafka, "w1")):
        ...

Stages as separate processes, as deployed, are :mod:`rewardbus.runtime.local`'s
``worker_pool`` (and its in-process ``aggregator``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from consumers import AggregatorConfig, run_aggregator
from rewardbus.wiring import SandboxOptions, build_executor
from sandbox_workers.executor import Executor
from sandbox_workers.service import CompletionRunner, WorkerConfig, WorkerStats, run_worker
from schemas import KafkaSettings

__all__ = ["Stage", "aggregator", "group_of", "running", "stop_process", "worker"]

Stage = Callable[[asyncio.Future[None], asyncio.Event], Awaitable[object]]


def group_of(kafka: KafkaSettings, name: str) -> str:
    """A consumer group of this test's own (its topic prefix): a dead member of one
    test never stalls the next."""
    return f"{kafka.topics.prefix}{name}"


@contextlib.asynccontextmanager
async def running(
    stage: Stage, *, ready_s: float = 60, stop_s: float = 120
) -> AsyncIterator[asyncio.Task[object]]:
    """``stage`` as a task, yielded once it is ready; told to stop and awaited at the end.

    A stage that fails to start raises its error here. One that the test ended
    itself (cancelled, crashed) is not stopped again; one that failed on its own
    raises its error at the end.
    """
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ready = asyncio.Event()
    task = asyncio.ensure_future(stage(stop, ready))
    waiter = asyncio.ensure_future(ready.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED, timeout=ready_s)
    waiter.cancel()
    if task.done():
        task.result()  # its start-up error
    if not ready.is_set():
        stop.set_result(None)
        await asyncio.wait_for(task, timeout=stop_s)
        raise AssertionError(f"stage not ready within {ready_s:g} s")
    try:
        yield task
    finally:
        if not stop.done():
            stop.set_result(None)
        if task.done():
            if not task.cancelled():
                task.result()
        else:
            await asyncio.wait_for(task, timeout=stop_s)


def worker(
    kafka: KafkaSettings,
    worker_id: str,
    *,
    stats: WorkerStats | None = None,
    wrap: Callable[[Executor], CompletionRunner] | None = None,
    **config: Any,
) -> Stage:
    """A sandbox worker (strict jail) in this test's workers group.

    ``wrap`` puts a runner around the real executor (a fault, a misconfigured
    judge); ``config``: further :class:`WorkerConfig` fields.
    """
    executor = build_executor(SandboxOptions(strict=True, worker_id=worker_id))
    runner: CompletionRunner = executor if wrap is None else wrap(executor)
    settings = WorkerConfig(group_id=group_of(kafka, "workers"), worker_id=worker_id, **config)

    async def serve(stop: asyncio.Future[None], ready: asyncio.Event) -> object:
        try:
            return await run_worker(
                kafka, settings, runner, shutdown=stop, ready=ready, stats=stats
            )
        finally:  # its warm zygotes must not outlive the test (the hostile suite counts them)
            await executor.aclose()

    return serve


def aggregator(kafka: KafkaSettings, config: AggregatorConfig | None = None) -> Stage:
    """The stream aggregator, by default in this test's aggregator group."""
    settings = config or AggregatorConfig(group_id=group_of(kafka, "agg"))

    def serve(stop: asyncio.Future[None], ready: asyncio.Event) -> Awaitable[object]:
        return run_aggregator(kafka, settings, shutdown=stop, ready=ready)

    return serve


async def stop_process(proc: asyncio.subprocess.Process, *, timeout_s: float = 40) -> None:
    """A stage run as a process, stopped as a deployment stops it (SIGTERM), killed
    if it has not exited within ``timeout_s``."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout=timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
