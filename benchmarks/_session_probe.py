"""Probe of live jailed Python sessions (issue 20 item 2): not a benchmark, a measurement.

Measures, with every isolation layer on (a strict JailSandbox, warm pool off):
- the start time of a session (start_session until its server said hello),
- the round trip of a trivial cell (``print(1)``) over many cells of one session,
- PSS and RSS of idle live sessions: each session's processes (the slot's spawner,
  the jail's init, the interpreter), read from /proc/<pid>/smaps_rollup,
  and the memory charged to its cgroup.

    PYTHONPATH=. python benchmarks/_session_probe.py [--sessions 20] [--cells 200]

Prints one JSON object last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

from rewardbus.observability.percentiles import percentile
from sandbox_workers.jail import JailConfig, JailSandbox, PoolConfig
from sandbox_workers.jail.live import JailLiveSession
from sandbox_workers.tools.session import SessionLimits

LIMITS = SessionLimits(memory_mb=256, max_processes=16, workdir_mb=16, lifetime_s=600.0)


def rollup(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in kB (0, 0 when it is gone)."""
    pss = rss = 0
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0, 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            pss = int(line.split()[1])
        elif line.startswith("Rss:"):
            rss = int(line.split()[1])
    return pss, rss


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError):
        return 0


def role(pid: int) -> str:
    """Which process of the session: the spawner and init are forks of one
    launcher (one command line), told apart by who their parent is."""
    chain = [pid]
    while len(chain) < 5 and chain[-1] not in (0, 1, os.getpid()):
        chain.append(parent(chain[-1]))
    depth = chain.index(os.getpid()) if os.getpid() in chain else -1
    return {1: "spawner", 2: "init", 3: "interpreter"}.get(depth, "child")


async def main(sessions: int, cells: int) -> dict[str, object]:
    sandbox = JailSandbox(JailConfig(pool=PoolConfig(enabled=False)))
    try:
        starts: list[float] = []
        live: list[JailLiveSession] = []
        for _ in range(sessions):
            began = time.perf_counter()
            live.append(await sandbox.start_session(LIMITS))
            starts.append((time.perf_counter() - began) * 1000)
        one = live[0]
        for _ in range(20):  # warm up
            await one.run_cell("print(1)", time_s=1.0, output_bytes=4096)
        trips: list[float] = []
        for _ in range(cells):
            began = time.perf_counter()
            result = await one.run_cell("print(1)", time_s=1.0, output_bytes=4096)
            trips.append((time.perf_counter() - began) * 1000)
            assert result.status == "ok" and result.stdout == b"1\n", result
        for session in live:
            await session.run_cell("x = 1", time_s=1.0, output_bytes=4096)
        await asyncio.sleep(0.5)
        per_role: dict[str, list[tuple[int, int]]] = {}
        totals, charged = [], []
        for session in live:
            pss_total = 0
            for pid in session.processes():
                pss, rss = rollup(pid)
                per_role.setdefault(role(pid), []).append((pss, rss))
                pss_total += pss
            totals.append(pss_total)
            charged.append(session.memory_bytes() / 1024)
        for session in live:
            await session.aclose()
    finally:
        sandbox.close()
    return {
        "sessions": sessions,
        "start_ms": {"p50": statistics.median(starts), "max": max(starts)},
        "cell_round_trip_ms": {
            "cells": cells,
            "p50": statistics.median(trips),
            "p99": percentile(trips, 99),
            "max": max(trips),
        },
        "pss_kb_per_session": {"mean": statistics.mean(totals), "max": max(totals)},
        "cgroup_charged_kb_per_session": statistics.mean(charged),
        "per_process_kb": {
            name: {
                "count": len(values),
                "pss_mean": statistics.mean(p for p, _ in values),
                "rss_mean": statistics.mean(r for _, r in values),
            }
            for name, values in sorted(per_role.items())
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--cells", type=int, default=200)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.sessions, args.cells)), indent=2))
