"""CPU per test of a jail session (one jail serving a suite's stdin tests), against a bare exec.

Issue 17 item 2, one layer down from ``bench_suites.py``: the same C doubling program,
run ``--tests`` times through one :meth:`JailSandbox.session` (every isolation layer
on), with no executor, judging or compile cache around it. CPU time, which a shared
machine disturbs less than wall time, split by who spent it:

- ``worker``: this process (the session's pipes, the status socket, the slot's
  counters, the result);
- ``sandboxed``: the slot's cgroup (the jail's init, each test's fork, confinement,
  exec and the program itself);
- ``machine``: every core's busy time (``/proc/stat``), which also holds what
  neither of the above is charged with (softirqs, kernel threads, other tenants).

The baseline, measured in the same run: ``subprocess.run`` of the same binary
per test (this process's CPU and its children's). Compare two trees by running
each with ``PYTHONPATH=<tree>``, alternated. Needs the strict jail and gcc.

    python benchmarks/bench_session.py [--tests 2000] [--bare 500]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import (
    emit_json,
    machine_busy_s,
    own_and_children_cpu_s,
    quiet_logs,
    sandbox_cpu_s,
    say,
)

from sandbox_workers import ExecRequest
from sandbox_workers.jail import JailConfig, JailSandbox

SOURCE = '#include <stdio.h>\nint main(void){long x;scanf("%ld",&x);printf("%ld\\n",2*x);}\n'
WARMUP = 50


def build(out_dir: Path) -> Path:
    src, binary = out_dir / "double.c", out_dir / "double"
    src.write_text(SOURCE)
    cc = shutil.which("cc") or shutil.which("gcc") or "gcc"
    subprocess.run([cc, "-O2", "-o", str(binary), str(src)], check=True)
    return binary


def request(binary: bytes, n: int) -> ExecRequest:
    return ExecRequest(
        argv=("./double",),
        files={"double": binary},
        executables=frozenset({"double"}),
        stdin=b"%d\n" % n,
        time_s=1.0,
        memory_mb=64,
        output_bytes=4096,
    )


def clocks() -> dict[str, float]:
    """CPU seconds so far: this process, its sandboxes, every core; and the wall clock."""
    return {
        "worker": time.process_time(),
        "sandboxed": sandbox_cpu_s(os.getpid()),
        "machine": machine_busy_s(),
        "wall": time.perf_counter(),
    }


def per_test_ms(before: dict[str, float], after: dict[str, float], tests: int) -> dict[str, float]:
    return {key: round((after[key] - before[key]) * 1000 / tests, 4) for key in before}


async def session_ms(binary: bytes, tests: int) -> dict[str, float]:
    sandbox = JailSandbox(JailConfig())
    try:
        session = sandbox.session(request(binary, 0))
        if session is None:
            raise SystemExit("this jail offers no sessions here (see the worker's log)")
        try:
            for n in range(WARMUP):
                result = await session.run(request(binary, n))
                if result.stdout != b"%d\n" % (2 * n):
                    raise SystemExit(f"the session printed {result.stdout!r} for {n}: {result}")
            before = clocks()
            for n in range(tests):
                await session.run(request(binary, n))
            return per_test_ms(before, clocks(), tests)
        finally:
            await session.aclose()
    finally:
        sandbox.close()


def bare_ms(argv: list[str], runs: int) -> dict[str, float]:
    cpu, busy, started = own_and_children_cpu_s(), machine_busy_s(), time.perf_counter()
    for n in range(runs):
        done = subprocess.run(argv, input=b"%d\n" % n, capture_output=True, check=True)
        if done.stdout != b"%d\n" % (2 * n):
            raise SystemExit(f"bare run printed {done.stdout!r} for {n}")
    return {
        "cpu": round((own_and_children_cpu_s() - cpu) * 1000 / runs, 4),
        "machine": round((machine_busy_s() - busy) * 1000 / runs, 4),
        "wall": round((time.perf_counter() - started) * 1000 / runs, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=2000, help="default: %(default)s")
    parser.add_argument("--bare", type=int, default=500, help="default: %(default)s")
    args = parser.parse_args()
    quiet_logs()
    with tempfile.TemporaryDirectory(prefix="bench-session-") as tmp:
        path = build(Path(tmp))
        say(f"bare: {args.bare} runs of subprocess.run")
        bare = bare_ms([str(path)], args.bare)
        say(f"session: {args.tests} tests after {WARMUP} to warm up")
        session = asyncio.run(session_ms(path.read_bytes(), args.tests))
    session["cpu"] = round(session["worker"] + session["sandboxed"], 4)
    ratios = {key: round(session[key] / bare[key], 3) for key in ("cpu", "machine", "wall")}

    def line(name: str, row: dict[str, float], digits: int) -> str:
        split = "".join(f"{row[key]:{width}.3f}" if key in row else " " * width
                        for key, width in (("worker", 9), ("sandboxed", 11)))  # fmt: skip
        rest = "".join(f"{row[key]:9.{digits}f}" for key in ("cpu", "machine", "wall"))
        return f"{name:<14}{split}{rest}"

    print(f"{'per test, ms':<14}{'worker':>9}{'sandboxed':>11}{'cpu':>9}{'machine':>9}{'wall':>9}")
    print(line("session", session, 3))
    print(line("bare exec", bare, 3))
    print(line("ratio", ratios, 2))
    emit_json(
        {
            "bench": "session",
            "tests": args.tests,
            "bare_runs": args.bare,
            "session_ms": session,
            "bare_ms": bare,
            "ratio": ratios,
        }
    )


if __name__ == "__main__":
    main()
