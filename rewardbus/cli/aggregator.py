"""``rewardbus aggregator``: the learner-side stream aggregator, until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping

from rewardbus.cli.common import (
    Subcommands,
    add_kafka_flags,
    add_metrics_flags,
    ready_line,
    required_kafka,
    telemetry,
)
from rewardbus.cli.shutdown import shutdown_future

__all__ = ["add_parser", "run"]

# Within Kubernetes' 30 s grace period for the aggregator.
STOP_TIMEOUT_S = 25.0


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    agg = sub.add_parser("aggregator", help="run the learner-side stream aggregator")
    add_kafka_flags(agg)
    agg.add_argument("--group-id", default="rewardbus-aggregator")
    add_metrics_flags(agg)
    agg.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Aggregate until stopped; prints its ready line once it is in its group."""
    from consumers import AggregatorConfig, run_aggregator

    kafka = required_kafka(args, env, "rewardbus-aggregator")
    metered = telemetry("rewardbus-aggregator", args, env)
    ready = asyncio.Event()

    async def announce() -> None:
        await ready.wait()
        print(ready_line("rewardbus aggregator", metered), flush=True)

    announcer = asyncio.create_task(announce())
    try:
        await run_aggregator(
            kafka,
            AggregatorConfig(group_id=args.group_id),
            shutdown=shutdown_future(stop_timeout_s=STOP_TIMEOUT_S),
            ready=ready,
        )
    finally:
        announcer.cancel()
        metered.shutdown()
    return 0
