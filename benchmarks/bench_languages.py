"""Every language: one trivial execution cold and warm, and the marginal cost of a test.

Issue 21 item 3. For each language this host runs, the program is the golden set's
``sum-correct`` canary (``rewardbus/canary/golden/<language>.toml``: read two integers,
print their sum), judged through the executor (strict jail, compile cache warmed by a
first run):

- ``cold``: one single-test execution with warm pools off (a fresh runtime per test);
- ``warm``: the same with the worker's warm pools on (``build_executor``); languages
  without a warm pool start their runtime fresh either way;
- ``per-test``: the marginal wall time of one more test, ``(median of a --large suite -
  median of a 1-test suite) / (large - 1)``, warm executor;
- ``bare``: ``subprocess.run`` of the same toolchain's launch command (the Language's own
  compile and launch argv, outside any jail, compiled once), median of --bare runs.

Ratios are against ``bare``, measured in the same run. Wall time, one execution at a time.

    python benchmarks/bench_languages.py [--languages ruby,lua] [--rounds N] [--large N]

Progress on stderr; a table, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import emit_json, quiet_logs, say

from rewardbus.canary.golden import load_golden
from sandbox_workers import Executor, ExecutorConfig, JailConfig, JailSandbox
from sandbox_workers.languages import BASE_ENV, LANGUAGES, Toolchain, discover_toolchains
from sandbox_workers.pool import PoolConfig
from schemas import Completion, IoSuite, Limits, Verdict


def sum_program(language: str) -> str:
    """The golden set's correct sum program of ``language``."""
    for canary in load_golden(languages=[language]):
        if canary.name == "sum-correct":
            return canary.code
    raise SystemExit(f"{language}: no sum-correct canary in the golden set")


def suite(cases: int) -> IoSuite:
    return IoSuite(
        inputs=[f"{i} {i + 1}\n" for i in range(cases)],
        outputs=[f"{2 * i + 1}\n" for i in range(cases)],
    )


async def judged_s(executor: Executor, language: str, code: str, cases: int) -> float:
    completion = Completion(
        sample_id=f"{language}-{cases}-{time.monotonic_ns()}",
        language=language,
        code=code,
        tests=suite(cases),
        limits=Limits(total_time_s=max(60.0, cases * 2.0), compile_time_s=120.0),
    )
    started = time.perf_counter()
    event = await executor.run(completion)
    elapsed = time.perf_counter() - started
    if event.verdict is not Verdict.ACCEPTED or event.total != cases:
        raise SystemExit(f"{language}: {cases} cases judged {event.verdict} ({event.message})")
    return elapsed


def bare_argv(language: str, toolchain: Toolchain, code: str, workdir: Path) -> list[str]:
    """Compile ``code`` outside the jail with the language's own compile step (once) and
    return its launch argv (run in ``workdir``)."""
    spec = LANGUAGES[language]
    source = spec.prepare_source(code)
    name = spec.source_name(source)
    (workdir / name).write_bytes(source.encode())
    env = {**BASE_ENV, "HOME": str(workdir), "TMPDIR": str(workdir)}
    step = spec.compile_step(toolchain, name)
    entry = name
    if step is not None:
        subprocess.run(
            step.argv, cwd=workdir, env={**env, **step.env}, check=True, capture_output=True
        )
        entry = step.entry
        for executable in step.executables:
            (workdir / executable).chmod(0o755)
    launch = spec.launch(toolchain, entry, Limits())
    for file, data in launch.files.items():
        (workdir / file).write_bytes(data)
    return list(launch.argv)


def bare_ms(language: str, argv: list[str], workdir: Path, env: dict[str, str], runs: int) -> float:
    times = []
    for i in range(runs):
        started = time.perf_counter()
        done = subprocess.run(
            argv,
            input=f"{i} {i + 1}\n",
            capture_output=True,
            text=True,
            cwd=workdir,
            env=env,
            check=False,
        )
        times.append(time.perf_counter() - started)
        if done.stdout.strip() != str(2 * i + 1):
            raise SystemExit(f"{language}: bare run printed {done.stdout!r} ({done.stderr[-300:]})")
    return statistics.median(times) * 1000


async def single_ms(executor: Executor, language: str, code: str, rounds: int) -> float:
    return (
        statistics.median([await judged_s(executor, language, code, 1) for _ in range(rounds)])
        * 1000
    )


async def per_test_ms(
    executor: Executor, language: str, code: str, args: argparse.Namespace
) -> float:
    small: list[float] = []
    large: list[float] = []
    for r in range(args.suite_rounds):
        pair = [(1, small), (args.large, large)]
        for cases, into in pair if r % 2 == 0 else reversed(pair):
            into.append(await judged_s(executor, language, code, cases))
    return (statistics.median(large) - statistics.median(small)) * 1000 / (args.large - 1)


async def measure(
    language: str,
    toolchain: Toolchain,
    executors: tuple[Executor, Executor],
    tmp: Path,
    args: argparse.Namespace,
) -> dict[str, object]:
    code = sum_program(language)
    cold, warm = executors
    workdir = tmp / language
    workdir.mkdir()
    say(f"{language}: bare baseline")
    argv = await asyncio.to_thread(bare_argv, language, toolchain, code, workdir)
    env = {**BASE_ENV, "HOME": str(workdir), "TMPDIR": str(workdir)}
    say(f"{language}: cold, warm, a {args.large}-test suite")
    await judged_s(cold, language, code, 1)  # compiles (cached for both executors' runs)
    await judged_s(warm, language, code, 1)
    cold_ms = await single_ms(cold, language, code, args.rounds)
    warm_ms = await single_ms(warm, language, code, args.rounds)
    test_ms = await per_test_ms(warm, language, code, args)
    exec_ms = await asyncio.to_thread(bare_ms, language, argv, workdir, env, args.bare)
    return {
        "language": language,
        "version": toolchain.version,
        "cold_ms": round(cold_ms, 2),
        "warm_ms": round(warm_ms, 2),
        "per_test_ms": round(test_ms, 2),
        "bare_ms": round(exec_ms, 2),
        "cold_ratio": round(cold_ms / exec_ms, 2),
        "warm_ratio": round(warm_ms / exec_ms, 2),
        "per_test_ratio": round(test_ms / exec_ms, 2),
    }


def print_table(rows: list[dict[str, object]]) -> None:
    print(f"{'language':11} {'cold ms':>9} {'warm ms':>9} {'per-test ms':>12} {'bare ms':>9}"
          f" {'cold/bare':>10} {'warm/bare':>10} {'test/bare':>10}  version")  # fmt: skip
    for r in rows:
        print(f"{r['language']:11} {r['cold_ms']:9.1f} {r['warm_ms']:9.1f} {r['per_test_ms']:12.1f}"
              f" {r['bare_ms']:9.1f} {r['cold_ratio']:10.2f} {r['warm_ratio']:10.2f}"
              f" {r['per_test_ratio']:10.2f}  {r['version']}")  # fmt: skip


async def main(args: argparse.Namespace) -> int:
    quiet_logs()
    cold_jail = JailSandbox(JailConfig(pool=PoolConfig(enabled=False)))
    warm_jail = JailSandbox(JailConfig(pool=PoolConfig(size=2)))
    with tempfile.TemporaryDirectory(prefix="bench-languages-") as tmp:
        state = Path(tmp) / "state"
        toolchains = discover_toolchains(state)
        cold = Executor(ExecutorConfig(compile_cache_dir=state, toolchains=toolchains), cold_jail)
        warm = Executor(ExecutorConfig(compile_cache_dir=state, toolchains=toolchains), warm_jail)
        try:
            wanted = args.languages or sorted(toolchains)
            missing = sorted(set(wanted) - set(toolchains))
            if missing:
                raise SystemExit(f"no toolchain here for {missing} (rewardbus doctor)")
            wanted = [name for name in wanted if LANGUAGES[name].output_kind == "text"]
            rows = [
                await measure(name, toolchains[name], (cold, warm), Path(tmp), args)
                for name in wanted
            ]
        finally:
            await cold.aclose()
            await warm.aclose()
    print_table(rows)
    emit_json({"bench": "languages", "large": args.large, "rounds": args.rounds,
               "bare": args.bare, "cpus": os.cpu_count(), "rows": rows})  # fmt: skip
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--languages", default="", help="comma-separated (default: every one here)")
    p.add_argument("--rounds", type=int, default=7, help="single-test runs per median")
    p.add_argument("--suite-rounds", type=int, default=2, help="runs of each suite size")
    p.add_argument("--large", type=int, default=100, help="tests in the large suite")
    p.add_argument("--bare", type=int, default=15, help="bare runs per median")
    args = p.parse_args(argv)
    args.languages = [name for name in args.languages.split(",") if name]
    unknown = set(args.languages) - set(LANGUAGES)
    if unknown:
        p.error(f"unknown languages {sorted(unknown)}")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
