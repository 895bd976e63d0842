"""Per-execution cost of each isolation layer, against baselines measured in the same run.

Baselines: ``subprocess.run`` of ``/bin/true`` and of ``python -I -S -c pass``.
Then the jail with layers switched on one at a time (launcher only, +namespaces,
+mounts, +cgroups, +seccomp, +uid/rlimits = the full jail), plus the full jail
with a fresh slot (new cgroups joined by a new spawner) per execution instead of
a resident one, the same two when executions arrive 100 ms apart (a cgroup join
after idle time waits for an RCU grace period), and the full jail's throughput
at a concurrency of 2 against bare subprocesses at 2. Each configuration runs
in a block, twice (forward and reverse order, so linear load drift cancels);
medians per block, averaged over the two passes. Each block's machine CPU per
execution (every process and kernel thread, from /proc/stat: what a jail costs
beyond its own processes, such as a net namespace's teardown in the kernel's
workqueue, counts) is printed beside /bin/true's wall time, with what it costs
over the baseline's. Prints a table, then one JSON object on the last line.

    python benchmarks/bench_isolation.py [--runs 100] [--python-runs 30] [--seconds 3]
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
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import machine_busy_s

from sandbox_workers.jail import JailConfig, JailSandbox
from sandbox_workers.pool import PoolConfig
from sandbox_workers.sandbox import BindMount, ExecRequest

# Each layer's cost is measured on the cold path; bench_sandbox measures the warm pool.
COLD = PoolConfig(enabled=False)

PREFIX = Path(sys.base_prefix).resolve()
PYTHON = str(PREFIX / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
MOUNTS = (BindMount(PREFIX, str(PREFIX)),)
TRUE = ExecRequest(argv=("/bin/true",))
PY_PASS = ExecRequest(argv=(PYTHON, "-I", "-S", "-c", "pass"), extra_mounts=MOUNTS)

_CGROUPS = frozenset({"cgroup_memory", "cgroup_pids", "cgroup_cpu"})
# Each step switches on more layers; disabled layers are what is still off.
STEPS: list[tuple[str, frozenset[str]]] = [
    ("launcher only", frozenset({"namespaces", "mounts", "seccomp", "uid", "rlimits"}) | _CGROUPS),
    ("+namespaces", frozenset({"mounts", "seccomp", "uid", "rlimits"}) | _CGROUPS),
    ("+mounts", frozenset({"seccomp", "uid", "rlimits"}) | _CGROUPS),
    ("+cgroups", frozenset({"seccomp", "uid", "rlimits"})),
    ("+seccomp", frozenset({"uid", "rlimits"})),
    ("full jail (+uid, rlimits)", frozenset()),
]


def median_ms(samples: list[float]) -> float:
    """Median of per-run milliseconds: robust to the odd scheduler hiccup."""
    return statistics.median(samples)


Runner = Callable[[ExecRequest], Awaitable[object]]


def bare_runner() -> Runner:
    """The baseline: a plain ``subprocess.run`` of the same argv, no isolation."""

    async def run(request: ExecRequest) -> object:
        # Blocking on purpose: the baseline is the plain synchronous call.
        return subprocess.run(list(request.argv), check=True)  # noqa: ASYNC221

    return run


async def blocks(
    runners: dict[str, Runner], request: ExecRequest, runs: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Median ms per execution of each runner, and machine CPU ms per execution, in blocks.

    Blocks, not round-robin: each run then pays the asynchronous teardown of its
    predecessor (e.g. network namespace cleanup) as it would in service, not the
    teardown of a different configuration. Two passes, forward then reverse,
    averaged: linear load drift on a shared machine cancels out.
    """
    passes: dict[str, list[float]] = {name: [] for name in runners}
    cpu: dict[str, list[float]] = {name: [] for name in runners}
    for order in (list(runners), list(reversed(runners))):
        for name in order:
            run = runners[name]
            samples = []
            busy = machine_busy_s()
            for _ in range(runs):
                start = time.perf_counter()
                await run(request)
                samples.append((time.perf_counter() - start) * 1000)
            cpu[name].append((machine_busy_s() - busy) * 1000 / runs)
            passes[name].append(median_ms(samples))
    mean = statistics.fmean
    return {n: mean(v) for n, v in passes.items()}, {n: mean(v) for n, v in cpu.items()}


async def sparse_ms(config: JailConfig, runs: int, gap_s: float) -> float:
    """Median ms of /bin/true when executions arrive ``gap_s`` apart (a quiet worker)."""
    samples = []
    async with JailSandbox(config) as sandbox:
        for _ in range(runs):
            await asyncio.sleep(gap_s)
            start = time.perf_counter()
            await sandbox.execute(TRUE)
            samples.append((time.perf_counter() - start) * 1000)
    return median_ms(samples)


async def jail_throughput(seconds: float, concurrency: int) -> float:
    """Executions of ``python -c pass`` per second through the full jail."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(sandbox: JailSandbox) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            result = await sandbox.execute(PY_PASS)
            assert result.ok, result
            done += 1

    async with JailSandbox(JailConfig(pool=COLD)) as sandbox:
        start = time.perf_counter()
        await asyncio.gather(*(worker(sandbox) for _ in range(concurrency)))
        return done / (time.perf_counter() - start)


def bare_throughput(seconds: float, concurrency: int) -> float:
    """The same with plain subprocesses from `concurrency` threads."""
    done = [0]
    deadline = time.perf_counter() + seconds

    def worker() -> None:
        while time.perf_counter() < deadline:
            subprocess.run(list(PY_PASS.argv), check=True)
            done[0] += 1

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done[0] / (time.perf_counter() - start)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100, help="runs per block, /bin/true")
    parser.add_argument("--python-runs", type=int, default=30, help="runs per block, python")
    parser.add_argument("--seconds", type=float, default=3.0, help="per throughput run")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_isolation needs root (namespaces, cgroups)")
    logging.getLogger("sandbox_workers.jail").setLevel(logging.ERROR)  # degraded on purpose

    sandboxes = [JailSandbox(JailConfig(strict=False, disabled=d, pool=COLD)) for _, d in STEPS]
    sandboxes.append(JailSandbox(JailConfig(reuse_slots=False, pool=COLD)))
    names = [name for name, _ in STEPS] + ["full jail, fresh slot per run"]
    runners: dict[str, Runner] = {"subprocess.run (baseline)": bare_runner()}
    runners.update({name: sb.execute for name, sb in zip(names, sandboxes, strict=True)})
    try:
        for sandbox in sandboxes:  # warm: page cache, cgroup slots
            await sandbox.execute(PY_PASS)
        true_ms, true_cpu = await blocks(runners, TRUE, args.runs)
        python_ms, _ = await blocks(runners, PY_PASS, args.python_runs)
    finally:
        for sandbox in sandboxes:
            await sandbox.aclose()

    base = ("subprocess.run (baseline)",) * 2
    print(
        f"{'configuration':32} {'true ms':>8} {'ratio':>8} {'cpu ms':>7} {'over':>6}"
        f" {'python ms':>9} {'ratio':>8}"
    )
    steps: dict[str, object] = {}
    for name in runners:
        t_ratio = true_ms[name] / true_ms[base[0]]
        p_ratio = python_ms[name] / python_ms[base[1]]
        over = true_cpu[name] - true_cpu[base[0]]
        print(
            f"{name:32} {true_ms[name]:8.2f} {t_ratio:7.2f}x {true_cpu[name]:7.2f} {over:+6.2f}"
            f" {python_ms[name]:9.2f} {p_ratio:7.2f}x"
        )
        steps[name] = {
            "true_ms": round(true_ms[name], 3),
            "python_ms": round(python_ms[name], 3),
            "true_ratio": round(t_ratio, 3),
            "python_ratio": round(p_ratio, 3),
            "true_cpu_ms": round(true_cpu[name], 3),
            "true_cpu_over_baseline_ms": round(over, 3),
        }
    reused = await sparse_ms(JailConfig(pool=COLD), 30, 0.1)
    fresh = await sparse_ms(JailConfig(reuse_slots=False, pool=COLD), 30, 0.1)
    print(
        f"/bin/true arriving 100 ms apart: resident slot {reused:.2f} ms, "
        f"fresh slot (cgroup join per run) {fresh:.2f} ms"
    )
    bare_rate = bare_throughput(args.seconds, concurrency=2)
    jail_rate = await jail_throughput(args.seconds, concurrency=2)
    print(
        f"python -c pass, 2 in flight: bare {bare_rate:.1f}/s, full jail {jail_rate:.1f}/s "
        f"({jail_rate / bare_rate:.2f}x)"
    )
    report = {
        "per_execution": steps,
        "sparse_100ms_true_ms": {"resident_slot": round(reused, 3), "fresh_slot": round(fresh, 3)},
        "throughput_2_in_flight": {
            "bare_per_s": round(bare_rate, 1),
            "jail_per_s": round(jail_rate, 1),
            "ratio": round(jail_rate / bare_rate, 3),
        },
    }
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
