"""``rewardbus cluster``: a local multi-broker KRaft cluster, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from rewardbus.cli.common import Subcommands
from rewardbus.cli.shutdown import shutdown_future

__all__ = ["add_parser", "run"]


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    cluster = sub.add_parser(
        "cluster", help="run a local multi-broker KRaft Kafka cluster (fault tests, rehearsals)"
    )
    cluster.add_argument("--brokers", type=int, default=3)
    cluster.add_argument("--data-dir", default=None, help="parent of each node's data dir")
    cluster.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Serve until stopped."""
    from rewardbus.runtime.cluster import ClusterConfig, serve_cluster

    del env
    root = Path(args.data_dir) if args.data_dir else None
    config = ClusterConfig(brokers=args.brokers, data_dir=root)

    def ready(bootstrap: str) -> None:
        print(f"Kafka cluster ready at {bootstrap} (Ctrl-C to stop)", flush=True)

    await serve_cluster(config, shutdown=shutdown_future(), on_ready=ready)
    return 0
