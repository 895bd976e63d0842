"""The top-level parser, and ``main``: logging, the command's run, its exit status.

Every failure a command reports is a :class:`~rewardbus.errors.ShellError`; this is
the one place that turns one into its message and exit status.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from kafkaio import KafkaIOError
from producers import PublishError
from rewardbus.cli import (
    aggregator,
    broker,
    canary,
    cluster,
    demo,
    doctor,
    jaeger,
    judge,
    prometheus,
    top,
    topics,
    trace,
    train_demo,
    worker,
)
from rewardbus.errors import KINDS, ShellError, Unavailable

__all__ = ["DESCRIPTION", "EXIT_STATUSES", "main", "parser"]

DESCRIPTION = (
    "The ``rewardbus`` command line: the only code that touches signals and the environment."
)

# In the order of the help's list of commands.
COMMANDS = (
    demo,
    train_demo,
    canary,
    broker,
    cluster,
    worker,
    aggregator,
    topics,
    judge,
    doctor,
    jaeger,
    trace,
    prometheus,
    top,
)

# What each exit status means, the same for every command (README: "Exit statuses").
EXIT_STATUSES: tuple[tuple[int, str], ...] = (
    (0, "done; a check the command ran (demo, judge, canary, doctor) passed"),
    *((kind.exit_code, kind.meaning) for kind in KINDS),
    (70, "worker: the event loop stalled (--loop-stall-s); restart it"),
    (130, "interrupted (Ctrl-C); a second SIGTERM or SIGINT exits 128 + the signal"),
)


def _epilog() -> str:
    rows = "\n".join(f"  {code:>3}  {meaning}" for code, meaning in EXIT_STATUSES)
    return f"exit statuses, the same for every command:\n{rows}"


def parser() -> argparse.ArgumentParser:
    """``rewardbus`` and every command's flags; the command's ``run`` in ``args.run``."""
    p = argparse.ArgumentParser(
        prog="rewardbus",
        description=DESCRIPTION,
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Entry point of the ``rewardbus`` console script.

    ``env`` (default: this process's environment, read once here) is everything the
    command learns from the environment; nothing writes to it.
    """
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    env = dict(os.environ) if env is None else env
    try:
        status: int = asyncio.run(args.run(args, env))
    except KeyboardInterrupt:
        return 130
    except ShellError as exc:
        print(f"rewardbus {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except (KafkaIOError, PublishError) as exc:
        # The broker could not be reached or refused: the host cannot do it now, as for
        # any Unavailable, and the message says which broker call failed.
        print(f"rewardbus {args.command}: Kafka: {exc}", file=sys.stderr)
        return Unavailable.exit_code
    return status
