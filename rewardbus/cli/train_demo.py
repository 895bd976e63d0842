"""``rewardbus train-demo``: GRPO on a tiny policy, every reward from the sandbox pipeline.

torch and verl are imported when it runs, never when the CLI is imported.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping
from pathlib import Path

from rewardbus.cli.common import Subcommands, add_kafka_flags, kafka_or_none
from rewardbus.cli.shutdown import shutdown_future
from rewardbus.errors import Unavailable, UsageError

__all__ = ["add_parser", "run"]


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    train = sub.add_parser(
        "train-demo",
        help="GRPO on a tiny policy, every reward from the sandbox pipeline (needs the verl extra)",
    )
    add_kafka_flags(train)
    train.add_argument("--steps", type=int, default=100)
    train.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    train.add_argument("--group-size", type=int, default=32, help="samples per prompt")
    train.add_argument("--device", choices=("auto", "cpu", "cuda", "npu"), default="auto")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument(
        "--plot", default="train-demo.png", help="PNG of the curves (default ./train-demo.png)"
    )
    train.add_argument("--json", action="store_true", help="print the summary as JSON last")
    train.add_argument("--no-strict", action="store_true", help="allow a degraded sandbox")
    train.add_argument(
        "--tasks", default="", metavar="NAMES", help="comma-separated subset of the task family"
    )
    train.add_argument(
        "--checkpoint-dir",
        default=None,
        metavar="DIR",
        help="save checkpoints (and, on the embedded broker, its data) in DIR",
    )
    train.add_argument(
        "--checkpoint-every", type=int, default=10, metavar="N", help="steps between checkpoints"
    )
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the checkpoint in --checkpoint-dir (a new run when there is none)",
    )
    train.add_argument(
        "--max-response-length",
        type=float,
        default=5.0,
        metavar="TOKENS",
        help="alert when the mean response length passes this (default 5)",
    )
    train.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Train; the summary (and the plot) at the end."""
    started = time.monotonic()
    try:
        from rewardbus.train_demo.loop import run_train_demo
    except ImportError as exc:
        raise Unavailable(
            f"train-demo needs the verl extra ({exc.name} is missing): make setup-verl"
        ) from None
    from rewardbus.train_demo.monitor import AlertRules
    from rewardbus.train_demo.options import TrainDemoOptions

    try:
        options = TrainDemoOptions(
            steps=args.steps,
            group_size=args.group_size,
            workers=args.workers,
            device=args.device,
            seed=args.seed,
            strict=not args.no_strict,
            json=args.json,
            plot=Path(args.plot),
            kafka=kafka_or_none(args, env, "train-demo"),
            alerts=AlertRules(max_response_length=args.max_response_length),
            tasks=tuple(name for name in args.tasks.split(",") if name),
            checkpoint_dir=Path(args.checkpoint_dir) if args.checkpoint_dir else None,
            checkpoint_every=args.checkpoint_every,
            resume=args.resume,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return await run_train_demo(options, shutdown=shutdown_future(), started=started)
