"""``rewardbus worker``: one sandbox worker, a member of the worker group, until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Coroutine, Mapping
from typing import Any

from rewardbus import __version__
from rewardbus.cli.common import (
    Subcommands,
    add_kafka_flags,
    add_metrics_flags,
    ready_line,
    required_kafka,
    telemetry,
)
from rewardbus.cli.shutdown import shutdown_future
from rewardbus.errors import UsageError

__all__ = ["add_parser", "run"]


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    worker = sub.add_parser("worker", help="run one sandbox worker (consumer-group member)")
    add_kafka_flags(worker)
    worker.add_argument("--group-id", default="rewardbus-workers")
    worker.add_argument("--concurrency", type=int, default=1)
    worker.add_argument("--worker-id", default=None)
    worker.add_argument("--instance-id", default=None, help="static group membership id")
    worker.add_argument("--no-strict", action="store_true", help="allow a degraded sandbox")
    worker.add_argument(
        "--stop-timeout-s",
        type=float,
        default=50.0,
        help="exit (status 1) if still running this long after SIGTERM: the drain (30 s)"
        " and the final commit fit, and it ends before Kubernetes' 60 s grace period",
    )
    worker.add_argument(
        "--loop-stall-s",
        type=float,
        default=60.0,
        help="exit (status 70) when the event loop stops this long: a completion wedged"
        " the worker; it is restarted and the record counted towards quarantine (0: off)",
    )
    worker.add_argument(
        "--result-cache-mb",
        type=int,
        default=None,
        metavar="N",
        help="result cache budget in MiB (0 disables the cache; default 256)",
    )
    worker.add_argument(
        "--max-tool-sessions",
        type=int,
        default=500,
        metavar="N",
        help="live tool sessions this worker holds (least recently used evicted first)",
    )
    worker.add_argument(
        "--tool-concurrency",
        type=int,
        default=16,
        metavar="N",
        help="tool-call cells run at once (calls of one session always run one at a time)",
    )
    add_metrics_flags(worker)
    worker.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Judge until stopped; prints its ready line once it is in its group."""
    from rewardbus.wiring import SandboxOptions, build_tool_sessions, start_executor
    from sandbox_workers.service import WorkerConfig, run_worker
    from sandbox_workers.tools.service import ToolConfig, run_tool_service
    from sandbox_workers.watchdog import watching_the_loop

    kafka = required_kafka(args, env, "rewardbus-worker")
    if args.loop_stall_s < 0:
        raise UsageError("--loop-stall-s must be 0 (off) or positive")
    config = WorkerConfig(
        group_id=args.group_id,
        concurrency=args.concurrency,
        group_instance_id=args.instance_id,
        runtime_version=f"rewardbus-{__version__}",
        **_optional(args),
    )
    if args.max_tool_sessions < 1 or args.tool_concurrency < 1:
        raise UsageError("--max-tool-sessions and --tool-concurrency must be positive")
    tools = ToolConfig(max_sessions=args.max_tool_sessions, concurrency=args.tool_concurrency)
    options = SandboxOptions(
        strict=not args.no_strict, worker_id=config.worker_id, concurrency=config.concurrency
    )
    executor = await start_executor(options)
    sessions = build_tool_sessions(executor)
    metered = telemetry("rewardbus-worker", args, env)
    ready, tools_ready = asyncio.Event(), asyncio.Event()
    if args.stop_timeout_s <= 0:
        raise UsageError("--stop-timeout-s must be positive")
    shutdown = shutdown_future(args.stop_timeout_s)

    async def announce() -> None:
        await ready.wait()
        await tools_ready.wait()
        # The demo (and operators' scripts) wait for this line.
        print(ready_line(f"rewardbus worker {config.worker_id}", metered), flush=True)

    announcer = asyncio.create_task(announce())
    try:
        async with watching_the_loop(args.loop_stall_s):
            # The tool service answers tool calls beside the completion worker, in a
            # consumer group of its own.
            await _side_by_side(
                run_worker(kafka, config, executor, shutdown=shutdown, ready=ready),
                run_tool_service(
                    kafka,
                    config,
                    tools,
                    factory=sessions,
                    runner=executor,
                    shutdown=shutdown,
                    ready=tools_ready,
                ),
            )
    finally:
        announcer.cancel()
        metered.shutdown()
    return 0


async def _side_by_side(*services: Coroutine[Any, Any, object]) -> None:
    """Run ``services`` until each returns; the first that raises cancels the others (each
    drains and leaves on the way out) and its error is raised as it is, for the exit status."""
    tasks = [asyncio.ensure_future(service) for service in services]
    try:
        done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = next((t for t in done if not t.cancelled() and t.exception() is not None), None)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if failed is not None:
        failed.result()  # raises its error


def _optional(args: argparse.Namespace) -> dict[str, Any]:
    """The WorkerConfig fields given on the command line (the rest keep their defaults)."""
    optional: dict[str, Any] = {}
    if args.worker_id:
        optional["worker_id"] = args.worker_id
    if args.result_cache_mb is not None:
        if args.result_cache_mb < 0:
            raise UsageError("--result-cache-mb must be 0 (off) or positive")
        optional["result_cache_bytes"] = args.result_cache_mb << 20
    return optional
