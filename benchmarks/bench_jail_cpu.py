"""CPU of one cold jail, split by who pays it, against fork+exec measured in the same run.

Executes ``/bin/true`` through the strict jail (every layer, warm pool off, one
slot) and with ``subprocess.run`` (the floor), in alternating blocks. Per
execution, from counters that do not depend on wall time:

- machine: every core's busy time (``/proc/stat``: every process, kernel threads);
- jail processes: the slot's cgroup (its spawner, the jail's init, the program),
  read from the cgroup above the slot, the worker's (the sandbox resets the
  slot's own v1 counter for each execution; the one above it keeps counting):
  v1 ``cpuacct.usage``, v2 ``cpu.stat``;
- worker: this process (building the request, the event loop, reading results);
- rest: machine - jail - worker (kernel work charged to no cgroup, such as a net
  namespace's teardown, and any other tenant of the machine).

The floor is the machine CPU of one ``subprocess.run``. The issue-17 target:
the jail at most 1.5 ms of machine CPU over the floor. Prints a table, then one
JSON object on the last line.

    python benchmarks/bench_jail_cpu.py [--runs 400] [--blocks 3]
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import emit_json, machine_busy_s

from sandbox_workers.jail import JailConfig, JailSandbox
from sandbox_workers.pool import PoolConfig
from sandbox_workers.sandbox import ExecRequest

TRUE = ExecRequest(argv=("/bin/true",))
TARGET_OVER_FLOOR_MS = 1.5


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def spawners() -> list[int]:
    """This process's slot spawners."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == me and b"--spawner" in cmdline:
                found.append(int(entry))
    return found


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, file system type, super options) of every mount."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, rest = line.partition(" - ")
        fstype, _source, options = rest.split(" ", 2)
        found.append((fields.split()[4], fstype, options))
    return found


def cgroup_cpu_reader(pid: int) -> tuple[str, Path]:
    """The CPU counter of the cgroup above ``pid``'s: ("v1"|"v2", file)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            for point, fstype, options in _mounts():
                if fstype == "cgroup" and "cpuacct" in options.split(","):
                    return "v1", Path(point + path).parent / "cpuacct.usage"
    for line in lines:
        hierarchy, _, path = line.split(":", 2)
        if hierarchy == "0":
            for point, fstype, _options in _mounts():
                if fstype == "cgroup2":
                    return "v2", Path(point + path).parent / "cpu.stat"
    raise SystemExit(f"no CPU accounting cgroup for pid {pid}")


def cgroup_cpu_s(reader: tuple[str, Path]) -> float:
    kind, path = reader
    if kind == "v1":
        return int(path.read_text()) / 1e9
    keyed = dict(line.split() for line in path.read_text().splitlines() if line)
    return int(keyed["usage_usec"]) / 1e6


async def jail_block(sandbox: JailSandbox, reader: tuple[str, Path], runs: int) -> dict[str, float]:
    machine, jail, worker = machine_busy_s(), cgroup_cpu_s(reader), self_cpu_s()
    for _ in range(runs):
        result = await sandbox.execute(TRUE)
        assert result.exit_code == 0, result
    machine = (machine_busy_s() - machine) * 1000 / runs
    jail = (cgroup_cpu_s(reader) - jail) * 1000 / runs
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
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_jail_cpu needs root (namespaces, cgroups)")
    logging.getLogger("sandbox_workers.jail").setLevel(logging.ERROR)
    floors: list[float] = []
    jails: list[dict[str, float]] = []
    async with JailSandbox(JailConfig(pool=PoolConfig(enabled=False))) as sandbox:
        for _ in range(30):  # warm: page cache, the slot and its spawner
            await sandbox.execute(TRUE)
        (spawner,) = spawners()
        reader = cgroup_cpu_reader(spawner)
        for _ in range(args.blocks):
            floors.append(floor_block(args.runs))
            jails.append(await jail_block(sandbox, reader, args.runs))
            assert spawners() == [spawner], "the slot's spawner changed: its cgroup is another"
    floor = statistics.median(floors)
    parts = {key: statistics.median(block[key] for block in jails) for key in jails[0]}
    over = parts["machine"] - floor
    print(f"CPU ms per execution of /bin/true, median of {args.blocks} blocks of {args.runs}")
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
            "cgroup": reader[0],
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
