"""``rewardbus judge``: judge completions from a JSON-lines file, no Kafka."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping
from pathlib import Path

from rewardbus.cli.common import Subcommands
from rewardbus.errors import UsageError

__all__ = ["add_parser", "run"]


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    judge = sub.add_parser("judge", help="judge completions from a JSON-lines file, no Kafka")
    judge.add_argument("file", help="JSON lines, one Completion each ('-' for stdin)")
    judge.add_argument("--no-strict", action="store_true", help="allow a degraded sandbox")
    judge.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """One JSON result per line on stdout; 1 when a line could not be judged."""
    from rewardbus.judge import judge_lines
    from rewardbus.wiring import SandboxOptions, start_executor

    del env
    executor = await start_executor(SandboxOptions(strict=not args.no_strict, worker_id="judge"))
    if args.file == "-":
        return await judge_lines(sys.stdin, executor, out=sys.stdout)
    path = Path(args.file)
    try:
        text = await asyncio.to_thread(path.read_text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return await judge_lines(text.splitlines(), executor, out=sys.stdout)
