"""``rewardbus topics``: create the rewardbus topics, print their names."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from rewardbus.cli.common import Subcommands, add_kafka_flags, required_kafka

__all__ = ["add_parser", "run"]


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    topics = sub.add_parser("topics", help="create the rewardbus topics")
    add_kafka_flags(topics)
    topics.add_argument("--partitions", type=int, default=4)
    topics.add_argument("--replication-factor", type=int, default=1)
    topics.add_argument(
        "--min-insync-replicas", type=int, default=None, help="default: the broker's setting"
    )
    topics.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Create every topic that is missing; one name per line."""
    from rewardbus.topics import ensure_topics

    kafka = required_kafka(args, env, "rewardbus-admin")
    await ensure_topics(
        kafka,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
    )
    for name in kafka.topics.all():
        print(name)
    return 0
