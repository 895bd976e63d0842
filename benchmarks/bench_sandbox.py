"""Sandbox throughput on HumanEval: the executor cold, warm and cached, against bare baselines.

Workload: the 164 HumanEval canonical solutions and their 164 broken variants
(``producers.humaneval_samples()``). Measured in one run, at each concurrency:

- baselines, per program (prompt + solution + test + ``check(entry_point)``):
  ``subprocess.run([python, "-I", "-S", "-c", program])`` (no site, as the
  sandbox's Python runs; plain ``python -c`` with site is reported too, but it
  pays ~35 ms of host .pth files and would flatter every ratio), and the
  physical floor: the program compiled in the parent, ``os.fork()``, ``exec``
  in the child, ``os._exit`` with its status (no isolation at all);
- rewardbus, every isolation layer on: the executor (extract, harness with one
  forked child per test, markers, scoring) with warm pools off ("cold") and on
  ("warm"), and a second pass through the worker's result-cache lookup path
  ("cached": fingerprint, local LRU, no Kafka); plus the sandbox alone running
  the same ``python -S -c program`` as the baselines (like for like).

Executions/s, p50/p99 latency and the ratio to each baseline at the same
concurrency; targets (warm vs the baselines' best, over all concurrencies) are
printed as PASS/FAIL. Progress goes to stderr; a table, then one JSON object on
the last line of stdout.

    python benchmarks/bench_sandbox.py [--quick] [--limit N] [--concurrency 1,2,4,8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any

from producers import HumanEvalSample, humaneval_samples
from sandbox_workers.cache_policy import cacheable, to_cached, to_reward
from sandbox_workers.executor import Executor, ExecutorConfig
from sandbox_workers.extract import extract_code
from sandbox_workers.fingerprint import fingerprint
from sandbox_workers.jail import JailConfig, JailSandbox
from sandbox_workers.judging.harness import kept_harness
from sandbox_workers.languages import discover_toolchains
from sandbox_workers.languages.python import BOOTSTRAPS
from sandbox_workers.pool import PoolConfig
from sandbox_workers.result_cache import LocalResultCache
from sandbox_workers.sandbox import BindMount, ExecRequest
from schemas import RewardEvent, suite_digest

PREFIX = Path(sys.base_prefix).resolve()
PYTHON = str(PREFIX / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
MOUNTS = (BindMount(PREFIX, str(PREFIX)),)
TARGET_SUBPROCESS = 1.6  # warm >= 1.6x the bare subprocess baseline's executions/s
TARGET_FORK = 0.6  # warm >= 0.6x the bare fork floor's


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Item:
    """One HumanEval completion and the program the baselines run for it."""

    sample: HumanEvalSample
    text: str
    code: CodeType


@dataclass
class Measure:
    """One configuration at one concurrency."""

    rate: float
    latencies_ms: list[float]
    failures: int = 0  # results that disagree with the expected verdict
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.latencies_ms)

        def rank(q: float) -> float:
            return round(ordered[max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.5) - 1))], 2)

        return {
            "per_s": round(self.rate, 1),
            "p50_ms": rank(0.50),
            "p99_ms": rank(0.99),
            "mean_ms": round(statistics.fmean(ordered), 2),
            "failures": self.failures,
            **self.extra,
        }


def build_items(limit: int | None) -> list[Item]:
    items = []
    for sample in humaneval_samples(limit=limit):
        completion = sample.completion
        suite = completion.tests
        assert suite is not None and hasattr(suite, "entry_point")
        code = extract_code(completion.response or "", "python") or ""
        text = f"{code}\n{suite.code}\ncheck({suite.entry_point})\n"  # type: ignore[union-attr]
        items.append(Item(sample, text, compile(text, "<string>", "exec")))
    return items


# ---------------------------------------------------------------------- baselines


def run_threads(items: Sequence[Item], concurrency: int, one: Callable[[Item], int]) -> Measure:
    """Each item through ``one`` (returns an exit status) from ``concurrency`` threads."""
    latencies: list[float] = []
    failures = [0]
    lock = threading.Lock()

    def timed(item: Item) -> None:
        start = time.perf_counter()
        status = one(item)
        elapsed = (time.perf_counter() - start) * 1000
        with lock:
            latencies.append(elapsed)
            if (status == 0) != item.sample.canonical:
                failures[0] += 1

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(timed, items))
    return Measure(len(items) / (time.perf_counter() - start), latencies, failures[0])


def subprocess_runner(options: tuple[str, ...]) -> Callable[[Item], int]:
    def one(item: Item) -> int:
        # The baseline is a plain call: argv list, output captured, no shell.
        done = subprocess.run([PYTHON, *options, "-c", item.text], capture_output=True, check=False)
        return done.returncode

    return one


def fork_one(item: Item) -> int:
    """The floor: fork, exec the program compiled in the parent, exit with its status."""
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            exec(item.code, {"__name__": "__main__"})  # the baseline runs the program
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - any failure is the program's exit status 1
            status = 1
        os._exit(status)
    _, waited = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(waited)


# ---------------------------------------------------------------------- rewardbus


async def run_async(
    items: Sequence[Item],
    concurrency: int,
    one: Callable[[Item], Awaitable[bool]],
) -> Measure:
    """Each item through ``one`` (returns whether the verdict is as expected), bounded."""
    latencies: list[float] = []
    failures = 0
    gate = asyncio.Semaphore(concurrency)

    async def timed(item: Item) -> None:
        nonlocal failures
        async with gate:
            start = time.perf_counter()
            ok = await one(item)
            latencies.append((time.perf_counter() - start) * 1000)
            failures += not ok

    start = time.perf_counter()
    await asyncio.gather(*(timed(item) for item in items))
    return Measure(len(items) / (time.perf_counter() - start), latencies, failures)


def expected(event: RewardEvent, item: Item) -> bool:
    return (event.score == 1.0) == item.sample.canonical


def executor_runner(executor: Executor) -> Callable[[Item], Awaitable[bool]]:
    async def one(item: Item) -> bool:
        return expected(await executor.run(item.sample.completion), item)

    return one


def sandbox_runner(sandbox: JailSandbox) -> Callable[[Item], Awaitable[bool]]:
    async def one(item: Item) -> bool:
        request = ExecRequest(
            argv=(PYTHON, "-S", "-c", item.text), extra_mounts=MOUNTS, time_s=10, memory_mb=512
        )
        result = await sandbox.execute(request)
        return (result.exit_code == 0) == item.sample.canonical

    return one


def cached_runner(executor: Executor, cache: LocalResultCache) -> Callable[[Item], Awaitable[bool]]:
    """The worker's path (judgement.Cached) without Kafka: fingerprint, local LRU, else run."""
    runtime = f"{executor.languages['python']}|"

    async def one(item: Item) -> bool:
        completion = item.sample.completion
        assert completion.tests is not None
        code = extract_code(completion.response or "", "python") or ""
        key = fingerprint(
            "python", code, suite_digest(completion.tests), completion.limits, runtime
        )
        entry = cache.get(key)
        if entry is not None:
            event = to_reward(entry, completion)
        else:
            event = await executor.run(completion)
            if cacheable(event):
                cache.put_result(to_cached(key, event))
        return expected(event, item)

    return one


# ---------------------------------------------------------------------- the run


@dataclass
class Setup:
    """Everything measured, built once: sandboxes stay up across concurrencies.

    The executor's Python and the like-for-like ``python -S -c`` are two start-up
    profiles: each warm sandbox serves one, so neither evicts the other's zygotes.
    """

    cold: JailSandbox
    warm: JailSandbox
    warm_plain: JailSandbox
    cold_executor: Executor
    warm_executor: Executor
    cache: LocalResultCache

    def close(self) -> None:
        for sandbox in (self.cold, self.warm, self.warm_plain):
            sandbox.close()


async def make_setup(max_concurrency: int, items: Sequence[Item]) -> Setup:
    toolchains = discover_toolchains(Path(os.environ.get("TMPDIR", "/tmp")))
    # Zygotes keep the harness loaded and the bootstraps compiled, as the worker's do
    # (rewardbus.wiring.build_executor).
    keep = (kept_harness(JailConfig().cache_dir),)
    pool = PoolConfig(size=max_concurrency, prewarm=1.0, keep_code=keep, precompile=BOOTSTRAPS)
    warm_config = JailConfig(pool=pool)
    cold = JailSandbox(JailConfig(pool=PoolConfig(enabled=False)))
    warm, warm_plain = JailSandbox(warm_config), JailSandbox(warm_config)
    config = ExecutorConfig(toolchains=toolchains)
    setup = Setup(
        cold=cold,
        warm=warm,
        warm_plain=warm_plain,
        cold_executor=Executor(config, cold),
        warm_executor=Executor(config, warm),
        cache=LocalResultCache(1 << 28),
    )
    # Warm-up, untimed: page cache, cgroup slots, and every zygote (the first
    # request of a profile waits for the pool's pre-warm starts).
    first = items[0]
    await setup.cold_executor.run(first.sample.completion)
    await setup.warm_executor.run(first.sample.completion)
    await sandbox_runner(cold)(first)
    await sandbox_runner(warm_plain)(first)
    # The cache holds every result before "cached" is timed (a second pass).
    await run_async(items, max_concurrency, cached_runner(setup.warm_executor, setup.cache))
    return setup


async def measure_level(
    setup: Setup, items: Sequence[Item], concurrency: int
) -> dict[str, Measure]:
    results: dict[str, Measure] = {}
    loop = asyncio.get_running_loop()

    def threads(one: Callable[[Item], int]) -> Awaitable[Measure]:
        return loop.run_in_executor(None, run_threads, items, concurrency, one)

    # Blocking baselines run in a helper thread so the event loop stays free;
    # nothing else runs meanwhile.
    results["bare subprocess (-I -S)"] = await threads(subprocess_runner(("-I", "-S")))
    results["bare fork (floor)"] = await threads(fork_one)
    results["rewardbus executor, cold"] = await run_async(
        items, concurrency, executor_runner(setup.cold_executor)
    )
    results["rewardbus executor, warm"] = await run_async(
        items, concurrency, executor_runner(setup.warm_executor)
    )
    results["rewardbus executor, cached"] = await run_async(
        items, concurrency, cached_runner(setup.warm_executor, setup.cache)
    )
    results["rewardbus sandbox, cold"] = await run_async(
        items, concurrency, sandbox_runner(setup.cold)
    )
    results["rewardbus sandbox, warm"] = await run_async(
        items, concurrency, sandbox_runner(setup.warm_plain)
    )
    results["subprocess python -c (site)"] = await threads(subprocess_runner(()))
    return results


def print_table(by_level: dict[int, dict[str, Measure]]) -> None:
    header = f"{'configuration':32} {'conc':>4} {'exec/s':>8} {'p50 ms':>8} {'p99 ms':>8}"
    print(header + f" {'vs subproc':>10} {'vs fork':>8} {'wrong':>5}")
    for level, results in by_level.items():
        sub = results["bare subprocess (-I -S)"].rate
        fork = results["bare fork (floor)"].rate
        for name, measure in results.items():
            s = measure.summary()
            print(
                f"{name:32} {level:4d} {s['per_s']:8.1f} {s['p50_ms']:8.2f} {s['p99_ms']:8.2f}"
                f" {measure.rate / sub:9.2f}x {measure.rate / fork:7.2f}x {measure.failures:5d}"
            )
        print()


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def targets(by_level: dict[int, dict[str, Measure]]) -> dict[str, Any]:
    """Warm vs the baselines, each at its best concurrency (peak executions/s)."""

    def peak(name: str) -> float:
        return max(results[name].rate for results in by_level.values())

    sub, fork = peak("bare subprocess (-I -S)"), peak("bare fork (floor)")
    out: dict[str, Any] = {
        "peak_bare_subprocess_per_s": round(sub, 1),
        "peak_fork_per_s": round(fork, 1),
    }
    for row in ("rewardbus executor, warm", "rewardbus sandbox, warm"):
        rate = peak(row)
        vs_sub, vs_fork = rate / sub, rate / fork
        key = row.split(",")[0].split()[-1]
        out[key] = {
            "peak_per_s": round(rate, 1),
            "vs_subprocess": round(vs_sub, 3),
            "vs_fork": round(vs_fork, 3),
            "pass_subprocess": vs_sub >= TARGET_SUBPROCESS,
            "pass_fork": vs_fork >= TARGET_FORK,
        }
        print(
            f"target {row}: {vs_sub:.2f}x bare subprocess (>= {TARGET_SUBPROCESS}x:"
            f" {_verdict(vs_sub >= TARGET_SUBPROCESS)}), {vs_fork:.2f}x bare fork"
            f" (>= {TARGET_FORK}x: {_verdict(vs_fork >= TARGET_FORK)})"
        )
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 problems, c=1,2")
    parser.add_argument("--limit", type=int, default=None, help="first N HumanEval problems")
    parser.add_argument("--concurrency", default="1,2,4,8", help="comma-separated levels")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_sandbox needs root (namespaces, cgroups)")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    limit = 20 if args.quick and args.limit is None else args.limit
    levels = [1, 2] if args.quick else [int(c) for c in args.concurrency.split(",")]
    items = build_items(limit)
    say(f"{len(items)} completions, concurrency {levels}, {os.cpu_count()} CPUs")
    setup = await make_setup(max(levels), items)
    by_level: dict[int, dict[str, Measure]] = {}
    try:
        for level in levels:
            say(f"concurrency {level}")
            by_level[level] = await measure_level(setup, items, level)
    finally:
        pools = {"executor": setup.warm.pool_stats, "sandbox": setup.warm_plain.pool_stats}
        setup.close()
    print_table(by_level)
    report: dict[str, Any] = {
        "benchmark": "bench_sandbox",
        "completions": len(items),
        "cpus": os.cpu_count(),
        "levels": {
            str(level): {name: m.summary() for name, m in results.items()}
            for level, results in by_level.items()
        },
        "pool": {name: vars(stats) if stats else None for name, stats in pools.items()},
    }
    report["targets"] = targets(by_level)
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
