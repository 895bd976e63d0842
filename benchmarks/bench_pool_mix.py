"""Warm pools under a mixed-language load: completions/s and zygote starts, per pool size.

A multilingual batch (MultiPL-E's languages in one GRPO step) reaches a worker as
completions of several interpreted languages in turn, each language its own warm-pool
profile. This judges ``--rounds`` rounds of a 5-test stdin suite in each of Python,
Ruby, PHP, R and Racket (every completion's code distinct: no result reuse), languages
interleaved, ``--concurrency`` at a time through one executor, once per pool
configuration: the pool off, Python's only (``fork_at_open`` off), and each ``--sizes``
with the worker's pre-warm fraction. A first round per configuration (not counted)
fills the compile cache and starts the first zygotes.

    python benchmarks/bench_pool_mix.py [--rounds 10] [--concurrency 2] [--sizes 3,6]

Progress on stderr; a table, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import emit_json, quiet_logs, say

from sandbox_workers import Executor, ExecutorConfig, JailConfig, JailSandbox
from sandbox_workers.pool import PoolConfig
from schemas import Completion, IoSuite, Limits

# Read two integers, print their sum; a trailing comment makes each completion distinct.
PROGRAMS = {
    "python": ("a, b = map(int, input().split()); print(a + b)", "#"),
    "ruby": ("a, b = STDIN.read.split.map(&:to_i); puts a + b", "#"),
    "php": (
        '<?php [$a, $b] = array_map("intval", explode(" ", trim(fgets(STDIN))));'
        ' echo $a + $b, "\\n";',
        "//",
    ),
    "r": ('x <- scan(file("stdin"), quiet = TRUE); cat(sum(x), "\\n")', "#"),
    "racket": ("#lang racket\n(displayln (+ (read) (read)))", ";"),
}
SUITE = IoSuite(inputs=[f"{i} 2\n" for i in range(5)], outputs=[f"{i + 2}\n" for i in range(5)])
# The worker's pre-warm fraction (rewardbus/wiring.py).
PREWARM = 0.25


def completions(rounds: int, tag: str) -> list[Completion]:
    return [
        Completion(
            sample_id=f"{tag}-{language}-{i}",
            language=language,
            code=f"{code}\n{comment} {tag} {i}\n",
            tests=SUITE,
            limits=Limits(time_s=2.0),
        )
        for i in range(rounds)
        for language, (code, comment) in PROGRAMS.items()
    ]


async def measure(name: str, pool: PoolConfig, args: argparse.Namespace) -> dict[str, Any]:
    say(f"{name}: a first round, then {args.rounds} rounds of {len(PROGRAMS)} languages")
    sandbox = JailSandbox(JailConfig(pool=pool))
    with tempfile.TemporaryDirectory(prefix="bench-pool-mix-") as cache:
        executor = Executor(ExecutorConfig(compile_cache_dir=Path(cache)), sandbox)
        gate = asyncio.Semaphore(args.concurrency)

        async def judge(completion: Completion) -> float:
            async with gate:
                return (await executor.run(completion)).score

        try:
            await asyncio.gather(*(judge(c) for c in completions(1, f"{name}-first")))
            stats = sandbox.pool_stats
            started_before = stats.started if stats else 0
            batch = completions(args.rounds, name)
            clock = time.monotonic()
            scores = await asyncio.gather(*(judge(c) for c in batch))
            wall_s = time.monotonic() - clock
        finally:
            await executor.aclose()
    if any(score != 1.0 for score in scores):
        raise SystemExit(f"{name}: a correct program was not accepted: {scores}")
    stats = sandbox.pool_stats
    return {
        "pool": name,
        "completions": len(batch),
        "per_s": round(len(batch) / wall_s, 2),
        "zygote_starts": (stats.started - started_before) if stats else 0,
        "cold_runs": stats.cold if stats else None,
    }


async def main(args: argparse.Namespace) -> int:
    quiet_logs()
    configs = [
        ("off", PoolConfig(enabled=False)),
        ("python only, size 3", PoolConfig(size=3, prewarm=PREWARM, fork_at_open=False)),
    ]
    configs += [(f"size {size}", PoolConfig(size=size, prewarm=PREWARM)) for size in args.sizes]
    rows = [await measure(name, pool, args) for name, pool in configs]
    print(f"{'pool':22} {'completions/s':>14} {'zygote starts':>14} {'cold runs':>10}")
    for row in rows:
        print(f"{row['pool']:22} {row['per_s']:14.2f} {row['zygote_starts']:14} "
              f"{row['cold_runs'] if row['cold_runs'] is not None else '-':>10}")  # fmt: skip
    emit_json({"bench": "pool_mix", "rounds": args.rounds, "concurrency": args.concurrency,
               "languages": list(PROGRAMS), "cpus": os.cpu_count(), "rows": rows})  # fmt: skip
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=10, help="completions per language")
    p.add_argument("--concurrency", type=int, default=2, help="completions judged at once")
    p.add_argument(
        "--sizes",
        type=lambda text: [int(size) for size in text.split(",")],
        default=[3, 6],
        help="pool sizes with every warm language (default: a 2-slot worker's before and now)",
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
