"""``rewardbus broker``: the embedded single-node Kafka broker, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from rewardbus.cli.common import Subcommands
from rewardbus.cli.shutdown import shutdown_future

__all__ = ["add_parser", "run"]


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    broker = sub.add_parser("broker", help="run the embedded single-node Kafka broker")
    broker.add_argument("--port", type=int, default=9092)
    broker.add_argument("--data-dir", default=None)
    broker.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Serve until stopped."""
    from rewardbus.runtime.broker import BrokerConfig, serve

    del env  # the broker's own settings (REWARDBUS_KAFKA_LIB, JAVA_HOME) are read there
    config = BrokerConfig(port=args.port, data_dir=Path(args.data_dir) if args.data_dir else None)

    def ready(bootstrap: str) -> None:
        print(f"Kafka broker ready at {bootstrap} (Ctrl-C to stop)", flush=True)

    await serve(config, shutdown=shutdown_future(), on_ready=ready)
    return 0
