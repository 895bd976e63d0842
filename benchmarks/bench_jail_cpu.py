"""CPU of one cold jail, split by who pays it, against fork+exec measured in the same run.

Executes ``/bin/true`` through the strict jail (every layer, warm pool off, one
slot) and with ``subprocess.run`` (the floor), in alternating blocks. Per
execution, from counters that do not depend on wall time:

- machine: every core's busy time (``/proc/stat``: every process, kernel threads);
- jail processes: the slot's cgroup (its spawner, the jail's init, the program),
  read from the cgroup above the slot, the worker's, as the CPU guard reads it
  (``_common.sandbox_cpu_s``: the sandbox resets the slot's own v1 counter for
  each execution; the one above it keeps counting);
- worker: this process (building the request, the event loop, reading results);
- rest: machine - jail - worker (kernel work charged to no cgroup, such as a net
  namespace's teardown, and any other tenant of the machine).

The floor is the machine CPU of one ``subprocess.run``. The issue-17 target:
the jail at most 1.5 ms of machine CPU over the floor. Prints a table, then one
JSON object on the last line.

``--mount-sets K`` (K > 1): each execution binds one of K host directories
read-only, in turn, so the slot's consecutive jails need K different roots (as
the compile and run steps of several languages do). The spawner keeps a built
root per set of mounts, up to eight per slot; the other sets' jails build their own.

    python benchmarks/bench_jail_cpu.py [--runs 400] [--blocks 3] [--mount-sets 1]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import emit_json, machine_busy_s, sandbox_cpu_s

from sandbox_workers.jail import JailConfig, JailSandbox
from sandbox_workers.pool import PoolConfig
from sandbox_workers.sandbox import BindMount, ExecRequest

TRUE = ExecRequest(argv=("/bin/true",))
TARGET_OVER_FLOOR_MS = 1.5


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def jail_cpu_s() -> float:
    """CPU seconds of this process's slots: the cgroup above them (sandbox_cpu_s)."""
    return sandbox_cpu_s(os.getpid())


def mount_sets(count: int, scratch: Path) -> list[ExecRequest]:
    """``/bin/true`` with one of ``count`` host directories bound (none when 1)."""
    if count <= 1:
        return [TRUE]
    requests = []
    for i in range(count):
        host = scratch / f"set{i}"
        host.mkdir()
        mount = BindMount(host, f"/opt/rewardbus-set{i}")
        requests.append(ExecRequest(argv=TRUE.argv, extra_mounts=(mount,)))
    return requests


async def jail_block(
    sandbox: JailSandbox, runs: int, requests: Sequence[ExecRequest]
) -> dict[str, float]:
    machine, jail, worker = machine_busy_s(), jail_cpu_s(), self_cpu_s()
    for i in range(runs):
        result = await sandbox.execute(requests[i % len(requests)])
        assert result.exit_code == 0, result
    machine = (machine_busy_s() - machine) * 1000 / runs
    jail = (jail_cpu_s() - jail) * 1000 / runs
    worker = (self_cpu_s() - worker) * 1000 / runs
    return {"machine": machine, "jail": jail, "worker": worker, "rest": machine - jail - worker}


def floor_block(runs: int) -> float:
    machine = machine_busy_s()
    for _ in range(runs):
        subprocess.run(list(TRUE.argv), check=True)
    return (machine_busy_s() - machine) * 1000 / runs


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=400, help="executions per block")
    parser.add_argument("--blocks", type=int, default=3, help="blocks of each, alternated")
    parser.add_argument(
        "--mount-sets", type=int, default=1, help="bind one of K host dirs per execution, in turn"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_jail_cpu needs root (namespaces, cgroups)")
    logging.getLogger("sandbox_workers.jail").setLevel(logging.ERROR)
    floors: list[float] = []
    jails: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-jail-") as scratch:
        requests = mount_sets(args.mount_sets, Path(scratch))
        async with JailSandbox(JailConfig(pool=PoolConfig(enabled=False))) as sandbox:
            for i in range(30):  # warm: page cache, the slot and its spawner
                await sandbox.execute(requests[i % len(requests)])
            if jail_cpu_s() == 0:
                sys.exit("bench_jail_cpu: no cgroup CPU counter for the jail's slots")
            for _ in range(args.blocks):
                floors.append(floor_block(args.runs))
                jails.append(await jail_block(sandbox, args.runs, requests))
    floor = statistics.median(floors)
    parts = {key: statistics.median(block[key] for block in jails) for key in jails[0]}
    over = parts["machine"] - floor
    sets = f", {args.mount_sets} sets of mounts in turn" if args.mount_sets > 1 else ""
    print(f"CPU ms per execution of /bin/true{sets}, median of {args.blocks} blocks of {args.runs}")
    print(f"{'floor: subprocess.run (machine)':40} {floor:7.3f}")
    for key, label in (
        ("machine", "cold jail (machine)"),
        ("jail", "  jail processes (spawner, init, program)"),
        ("worker", "  worker (this process)"),
        ("rest", "  rest (kernel threads, other tenants)"),
    ):
        print(f"{label:40} {parts[key]:7.3f} {parts[key] / floor:6.2f}x floor")
    verdict = "PASS" if over <= TARGET_OVER_FLOOR_MS else "FAIL"
    print(f"target: jail over the floor {over:.3f} ms (<= {TARGET_OVER_FLOOR_MS}: {verdict})")
    emit_json(
        {
            "benchmark": "bench_jail_cpu",
            "runs": args.runs,
            "blocks": args.blocks,
            "mount_sets": args.mount_sets,
            "floor_ms": round(floor, 3),
            "floor_blocks": [round(v, 3) for v in floors],
            "jail_ms": {key: round(value, 3) for key, value in parts.items()},
            "jail_blocks": [{k: round(v, 3) for k, v in block.items()} for block in jails],
            "over_floor_ms": round(over, 3),
            "target_over_floor_ms": TARGET_OVER_FLOOR_MS,
            "pass": over <= TARGET_OVER_FLOOR_MS,
        }
    )


if __name__ == "__main__":
    asyncio.run(main())
