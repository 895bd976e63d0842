"""Why the jail sets isolation up itself instead of running bubblewrap per execution.

Median per-execution wall time, sequential, for a trivial program:
bare subprocess (the baseline, measured in the same run), bubblewrap with
namespaces and read-only mounts only (no cgroups, rlimits or seccomp deny-list),
and the rewardbus jail with every layer on. Needs ``bwrap`` (Debian:
``apt-get install bubblewrap``); without it the bubblewrap rows are skipped and
the JSON says so.

    .venv/bin/python benchmarks/bench_bwrap.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sandbox_workers.jail import JailConfig, JailSandbox, PoolConfig
from sandbox_workers.sandbox import BindMount, ExecRequest

PYTHON_PREFIX = Path(sys.base_prefix).resolve()
PYTHON = str(PYTHON_PREFIX / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")
PROGRAMS = {"true": ("/bin/true",), "python": (PYTHON, "-S", "-c", "pass")}


def bwrap_argv(bwrap: str) -> list[str]:
    binds = ["/usr", "/bin", "/lib", "/lib64", str(PYTHON_PREFIX)]
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    for path in binds:
        if Path(path).exists():
            argv += ["--ro-bind", path, path]
    return [*argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/work",
            "--chdir", "/work"]  # fmt: skip


def median_ms(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def jail_ms(runs: int) -> dict[str, float]:
    out = {}
    # The cold path: bubblewrap has no warm pool to compare with (bench_sandbox has it).
    async with JailSandbox(JailConfig(pool=PoolConfig(enabled=False))) as jail:
        mounts = (BindMount(PYTHON_PREFIX, str(PYTHON_PREFIX)),)
        for name, argv in PROGRAMS.items():
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                result = await jail.execute(ExecRequest(argv=argv, extra_mounts=mounts))
                times.append((time.perf_counter() - start) * 1000)
                if result.exit_code != 0:
                    raise RuntimeError(f"jail run failed: {result}")
            out[name] = statistics.median(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    bwrap = shutil.which("bwrap")
    rows: dict[str, dict[str, float | None]] = {}
    for name, argv in PROGRAMS.items():
        bare = median_ms(list(argv), args.runs)
        bw = median_ms([*bwrap_argv(bwrap), *argv], args.runs) if bwrap else None
        rows[name] = {"bare_ms": round(bare, 2), "bwrap_ms": round(bw, 2) if bw else None}
    for name, ms in asyncio.run(jail_ms(args.runs)).items():
        rows[name]["jail_ms"] = round(ms, 2)
    print(f"{'program':8} {'bare':>8} {'bwrap ns+mounts':>16} {'jail, all layers':>17}")
    for name, row in rows.items():
        bw_text = f"{row['bwrap_ms']:.2f}" if row["bwrap_ms"] is not None else "n/a"
        print(f"{name:8} {row['bare_ms']:8.2f} {bw_text:>16} {row['jail_ms']:17.2f}  (ms, median)")
        row["jail_over_bare"] = round(row["jail_ms"] / row["bare_ms"], 2)  # type: ignore[operator]
        if row["bwrap_ms"] is not None:
            row["jail_over_bwrap"] = round(row["jail_ms"] / row["bwrap_ms"], 2)  # type: ignore[operator]
    print(json.dumps({"benchmark": "bwrap_vs_jail", "bwrap_available": bwrap is not None,
                      "runs": args.runs, "programs": rows}))  # fmt: skip


if __name__ == "__main__":
    main()
