"""Python assert suites: test code compiled once by the worker, against compiled per execution.

The worker compiles a suite's test code with the comparison guard once and
sends the code object (``TestCodeCache``); the baseline, measured in the same
run on the same jail, is the harness compiling it in the sandbox at every
execution (``ExecutorConfig(test_code_cache_bytes=0)``, what every execution
did before). Two workloads:

- ``humaneval``: the 164 HumanEval canonical solutions (``check(candidate)``,
  ~10 asserts each);
- ``many-asserts``: one function judged against an MBPP-style suite of
  ``--cases`` (200) assert cases, the shape of suites generated at scale.

Each item runs once per configuration, in ABBA order (the order flips every
item), so load drift cancels; one execution at a time, warm pools on. Reported:
median and mean wall latency per execution and the ratio cached / baseline
(below 1 is faster). Progress goes to stderr; one JSON object on the last line.

    python benchmarks/bench_test_code.py [--quick] [--rounds N] [--cases N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import emit_json, quiet_logs, say

from producers import humaneval_samples
from sandbox_workers.executor import Executor, ExecutorConfig
from sandbox_workers.jail import JailConfig, JailSandbox
from sandbox_workers.pool import PoolConfig
from schemas import AssertSuite, Completion, Limits, Verdict

CONFIGS = {"worker-compiled": 32 << 20, "sandbox-compiled": 0}


def humaneval(limit: int | None) -> list[Completion]:
    return [s.completion for s in humaneval_samples(limit=limit) if s.canonical]


def many_asserts(cases: int, copies: int) -> list[Completion]:
    suite = AssertSuite(
        cases=[f"assert square({i}) == {i * i}" for i in range(cases)], entry_point="square"
    )
    code = "def square(x):\n    return x * x\n"
    limits = Limits(time_s=1.0, total_time_s=120.0)
    return [
        Completion(sample_id=f"sq-{n}", code=code, tests=suite, limits=limits)
        for n in range(copies)
    ]


async def measure(
    executors: dict[str, Executor], items: Sequence[Completion], rounds: int
) -> dict[str, list[float]]:
    latencies: dict[str, list[float]] = {name: [] for name in executors}
    order = list(executors)
    for item in items[: min(len(items), 8)]:  # warm each pool and cache first
        for executor in executors.values():
            await executor.run(item)
    for _ in range(rounds):
        for item in items:
            order.reverse()
            for name in order:
                started = time.perf_counter()
                event = await executors[name].run(item)
                latencies[name].append((time.perf_counter() - started) * 1000)
                if event.verdict is not Verdict.ACCEPTED:
                    raise SystemExit(f"{name}: {item.sample_id} came out {event.verdict}")
    return latencies


def summary(latencies: dict[str, list[float]]) -> dict[str, object]:
    result: dict[str, object] = {
        name: {
            "n": len(values),
            "p50_ms": round(statistics.median(values), 2),
            "mean_ms": round(statistics.fmean(values), 2),
        }
        for name, values in latencies.items()
    }
    cached, baseline = latencies["worker-compiled"], latencies["sandbox-compiled"]
    result["ratio_p50"] = round(statistics.median(cached) / statistics.median(baseline), 3)
    result["ratio_mean"] = round(statistics.fmean(cached) / statistics.fmean(baseline), 3)
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 problems, 1 round")
    parser.add_argument("--rounds", type=int, default=3, help="passes over each workload")
    parser.add_argument("--cases", type=int, default=200, help="asserts in many-asserts")
    args = parser.parse_args()
    quiet_logs()
    rounds = 1 if args.quick else args.rounds
    workloads = {
        "humaneval": humaneval(20 if args.quick else None),
        "many-asserts": many_asserts(args.cases, 5 if args.quick else 20),
    }
    jail = JailConfig(strict=True, pool=PoolConfig(size=2))
    sandbox = JailSandbox(jail)
    state = jail.cache_dir / "executor"
    executors = {
        name: Executor(ExecutorConfig(compile_cache_dir=state, test_code_cache_bytes=size), sandbox)
        for name, size in CONFIGS.items()
    }
    report: dict[str, object] = {}
    try:
        for name, items in workloads.items():
            say(f"{name}: {len(items)} completions x {rounds} round(s) x {len(executors)}")
            report[name] = summary(await measure(executors, items, rounds))
    finally:
        await sandbox.aclose()
    for name, result in report.items():
        assert isinstance(result, dict)
        cells = "  ".join(
            f"{config}: p50 {result[config]['p50_ms']:.2f} ms mean {result[config]['mean_ms']:.2f}"
            for config in CONFIGS
        )
        print(f"{name:13} {cells}  ratio p50 {result['ratio_p50']:.3f}")
    emit_json({"benchmark": "test_code", "rounds": rounds, **report})


if __name__ == "__main__":
    asyncio.run(main())
