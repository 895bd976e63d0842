"""``rewardbus canary``: the golden set, continuously, through the live topics."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rewardbus.cli.common import (
    Subcommands,
    add_kafka_flags,
    add_metrics_flags,
    required_kafka,
    telemetry,
)
from rewardbus.cli.shutdown import shutdown_future

if TYPE_CHECKING:
    from rewardbus.canary.command import CanaryOptions

__all__ = ["add_parser", "options", "run"]


def _rate(text: str) -> float:
    from rewardbus.canary.loop import parse_rate

    try:
        return parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    canary = sub.add_parser(
        "canary",
        help="judge the golden set continuously through the live topics (docs/canaries.md)",
    )
    add_kafka_flags(canary)
    canary.add_argument(
        "--rate", type=_rate, default="0.2/s", help="canaries per second (0.2/s, 12/min, 30/h)"
    )
    canary.add_argument("--once", action="store_true", help="one pass over the set, then exit")
    canary.add_argument("--rounds", type=int, default=None, help="passes over the set, then exit")
    canary.add_argument("--languages", default="", help="comma-separated subset of languages")
    canary.add_argument("--golden", default=None, help="a directory of golden-set TOML files")
    canary.add_argument("--timeout", type=float, default=180.0, help="seconds to wait per canary")
    canary.add_argument("--max-in-flight", type=int, default=8)
    add_metrics_flags(canary)
    canary.set_defaults(run=run)


def options(args: argparse.Namespace) -> CanaryOptions:
    """The parsed flags as the canary command's typed options."""
    from rewardbus.canary.command import CanaryOptions

    return CanaryOptions(
        golden=Path(args.golden) if args.golden else None,
        languages=tuple(name for name in args.languages.split(",") if name),
        rate_per_s=args.rate,
        max_in_flight=args.max_in_flight,
        answer_timeout_s=args.timeout,
        rounds=1 if args.once else args.rounds,
    )


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """0 when every canary answered and matched, 1 otherwise (docs/canaries.md)."""
    from rewardbus.canary.command import run_command

    kafka = required_kafka(args, env, "rewardbus-canary")
    metered = telemetry("rewardbus-canary", args, env)
    if metered.metrics_url is not None:  # stdout is the report; scripts read this line
        print(f"rewardbus canary: metrics at {metered.metrics_url}", file=sys.stderr, flush=True)
    try:
        return await run_command(options(args), kafka, shutdown=shutdown_future())
    finally:
        metered.shutdown()
