"""``rewardbus worker``: one sandbox worker, a member of the worker group, until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping
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
    add_metrics_flags(worker)
    worker.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Judge until stopped; prints its ready line once it is in its group."""
    from rewardbus.wiring import SandboxOptions, start_executor
    from sandbox_workers.service import WorkerConfig, run_worker
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
    executor = await start_executor(
        SandboxOptions(
            strict=not args.no_strict, worker_id=config.worker_id, concurrency=config.concurrency
        )
    )
    metered = telemetry("rewardbus-worker", args, env)
    ready = asyncio.Event()
    if args.stop_timeout_s <= 0:
        raise UsageError("--stop-timeout-s must be positive")
    shutdown = shutdown_future(args.stop_timeout_s)

    async def announce() -> None:
        await ready.wait()
        # The demo (and operators' scripts) wait for this line.
        print(ready_line(f"rewardbus worker {config.worker_id}", metered), flush=True)

    announcer = asyncio.create_task(announce())
    try:
        async with watching_the_loop(args.loop_stall_s):
            await run_worker(kafka, config, executor, shutdown=shutdown, ready=ready)
    finally:
        announcer.cancel()
        metered.shutdown()
    return 0


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
