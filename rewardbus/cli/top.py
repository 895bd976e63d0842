"""``rewardbus top``: a live view of a running deployment from its metrics."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from rewardbus.cli.common import Subcommands
from rewardbus.cli.shutdown import shutdown_future
from rewardbus.errors import UsageError

__all__ = ["add_parser", "run"]


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    top = sub.add_parser("top", help="live view of a running deployment from its metrics")
    source = top.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--metrics",
        action="append",
        default=None,
        metavar="URL",
        help="a /metrics endpoint to scrape (repeatable)",
    )
    source.add_argument("--prometheus", metavar="URL", help="a Prometheus that scrapes them")
    top.add_argument("--interval", type=float, default=2.0, metavar="S", help="redraw period")
    top.add_argument(
        "--window", type=float, default=30.0, metavar="S", help="rate look-back (--prometheus)"
    )
    top.add_argument("--once", action="store_true", help="render one frame and exit")
    top.add_argument("--width", type=int, default=80)
    top.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Redraw until stopped (or once)."""
    from rewardbus.observability.top import TopOptions, run_top

    del env
    try:
        options = TopOptions(
            metrics_urls=tuple(args.metrics or ()),
            prometheus_url=args.prometheus,
            interval_s=args.interval,
            window_s=args.window,
            once=args.once,
            width=args.width,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return await run_top(options, out=sys.stdout, shutdown=shutdown_future())
