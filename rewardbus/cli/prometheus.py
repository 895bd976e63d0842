"""``rewardbus prometheus``: Prometheus on 127.0.0.1 scraping the given endpoints."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rewardbus.cli.common import Subcommands
from rewardbus.cli.shutdown import shutdown_future
from rewardbus.errors import UsageError

if TYPE_CHECKING:
    from rewardbus.observability.prometheus import PrometheusConfig

__all__ = ["add_parser", "run"]


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    prom = sub.add_parser(
        "prometheus",
        help="run Prometheus on 127.0.0.1, scraping the given /metrics endpoints",
    )
    prom.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a worker's or aggregator's --metrics-port endpoint (repeatable)",
    )
    prom.add_argument("--port", type=int, default=9090, help="its HTTP API and UI (0: any free)")
    prom.add_argument(
        "--scrape-interval", type=float, default=2.0, metavar="S", help="seconds (default 2)"
    )
    prom.add_argument(
        "--rules",
        action="append",
        default=[],
        metavar="FILE",
        help="alert rule file to evaluate, e.g. infra/prometheus/rewardbus.rules.yml (repeatable)",
    )
    prom.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Scrape until stopped."""
    from rewardbus.observability.prometheus import serve

    config = _config(args)
    await serve(config, env=env, shutdown=shutdown_future(), on_ready=_ready)
    return 0


def _config(args: argparse.Namespace) -> PrometheusConfig:
    from rewardbus.observability.prometheus import PrometheusConfig

    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be 0 (any free port) to 65535")
    try:
        config = PrometheusConfig(
            port=args.port,
            targets=tuple(args.target),
            scrape_interval_s=args.scrape_interval,
            rule_files=tuple(Path(path) for path in args.rules),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for path in config.rule_files:
        if not path.is_file():
            raise UsageError(f"no rule file {path}")
    return config


def _ready(running: PrometheusConfig) -> None:
    print(
        f"Prometheus ready at {running.url}, scraping {len(running.targets)} target(s) "
        f"every {running.scrape_interval_s:g} s (Ctrl-C to stop)",
        flush=True,
    )
