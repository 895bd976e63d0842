"""Tool calls a rollout waits on: live sessions through Kafka against the in-process floor.

Measured in one run, every isolation layer on, two worker processes (one core each):

- the floor: the same cell compiled and run in this process (``exec`` in a kept
  namespace, stdout captured), and a fresh jailed process per call (the sandbox alone,
  warm pool on, no Kafka: what a stateless tool costs without the bus);
- round trips of a trivial cell (``print(1)``) through Kafka at 1, 8, 32 and 128
  concurrent sessions (after an untimed warm-up): each session's calls one after
  another with no pause (a closed loop: at 32 sessions this 2-core machine is
  saturated), the sessions at once; p50/p99 of the client's round trip, with the
  worker's exec and queue times, and CPU per call by component;
- stateless calls (a fresh jailed program per call) through Kafka, 8 at once;
- sessions held: ``--held`` sessions opened (each defines ``x``), the workers' PSS
  (every process below each worker, ``/proc/*/smaps_rollup``) before and after, then
  every session read back (``print(x)``): none may have been rebuilt;
- a rebuild: a session of 10 accepted cells whose interpreter is then killed
  (``os._exit``); the next call is rebuilt by replay: its replay time and round trip.

Targets (issue 20): p50 <= 15 ms and p99 <= 60 ms at 32 sessions; 1,000 sessions held by
two workers; <= 10 MB PSS per session beyond the shared interpreter. Progress on stderr,
a table, then one JSON object on the last line of stdout.

    .venv/bin/python benchmarks/bench_tools.py [--quick] [--bootstrap-servers HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import (
    Cluster,
    CpuMeter,
    Target,
    cluster,
    emit_json,
    fresh_kafka,
    percentiles,
    quiet_logs,
    ratio,
    say,
    workers,
)

from consumers.tool_client import ToolClient, ToolClientConfig
from sandbox_workers.jail import JailConfig, JailSandbox
from sandbox_workers.sandbox import BindMount, ExecRequest
from schemas import KafkaSettings, ToolLimits, ToolResult

PREFIX = Path(sys.base_prefix).resolve()
PYTHON = str(PREFIX / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
CELL = "print(1)"
LIMITS = ToolLimits(time_s=5.0, memory_mb=256)
TARGET_P50_MS = 15.0
TARGET_P99_MS = 60.0
TARGET_HELD = 1000
TARGET_PSS_MB = 10.0


@dataclass(frozen=True)
class Plan:
    """How big each phase is; ``--quick`` shrinks everything for a smoke run."""

    levels: tuple[int, ...]
    calls: int  # per level, in all (spread over the level's sessions)
    held: int
    floor_calls: int
    rebuilds: int

    @staticmethod
    def make(quick: bool, held: int | None) -> Plan:
        if quick:
            return Plan((1, 8, 32), 96, held or 40, 50, 2)
        return Plan((1, 8, 32, 128), 1280, held or TARGET_HELD, 400, 5)


# -- floors ---------------------------------------------------------------------------


def in_process(calls: int) -> dict[str, Any]:
    """The cell compiled and run here, in a namespace kept across calls: no isolation."""
    namespace: dict[str, Any] = {}
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(CELL, "<cell>", "exec"), namespace)
        assert out.getvalue() == "1\n"
        times.append((time.perf_counter() - start) * 1000)
    return percentiles(times)


async def jailed_process(calls: int) -> dict[str, Any]:
    """A fresh jailed interpreter per call (warm pool on), the sandbox alone."""
    request = ExecRequest(
        argv=(PYTHON, "-I", "-S", "-c", CELL), extra_mounts=(BindMount(PREFIX, str(PREFIX)),)
    )
    times = []
    async with JailSandbox(JailConfig()) as sandbox:
        await sandbox.warm(request)
        for _ in range(calls):
            start = time.perf_counter()
            result = await sandbox.execute(request)
            times.append((time.perf_counter() - start) * 1000)
            assert result.ok and result.stdout == b"1\n", result
    return percentiles(times)


# -- through Kafka --------------------------------------------------------------------


def _check(result: ToolResult, stdout: str) -> None:
    if result.status != "ok" or result.stdout != stdout:
        raise RuntimeError(f"unexpected tool result: {result}")


async def _timed(
    client: ToolClient, session: str, code: str, **kwargs: Any
) -> tuple[float, ToolResult]:
    start = time.perf_counter()
    result = await client.run(session, code, limits=LIMITS, **kwargs)
    return (time.perf_counter() - start) * 1000, result


async def level(
    client: ToolClient, meter: CpuMeter, sessions: int, calls: int, tag: str
) -> dict[str, Any]:
    """``sessions`` sessions at once, each running its share of ``calls`` trivial cells.

    CPU per call counts every call of the level, each session's first (untimed) one too.
    """
    per_session = max(3, calls // sessions)
    ids = [f"{tag}-{sessions}-{i}" for i in range(sessions)]
    rtts: list[float] = []
    results: list[ToolResult] = []

    async def one(session: str) -> None:
        _check((await _timed(client, session, "pass"))[1], "")  # the session's start: not timed
        for _ in range(per_session):
            rtt, result = await _timed(client, session, CELL)
            _check(result, "1\n")
            rtts.append(rtt)
            results.append(result)

    before, start = meter.snapshot(), time.perf_counter()
    await asyncio.gather(*(one(session) for session in ids))
    elapsed, after = time.perf_counter() - start, meter.snapshot()
    await asyncio.gather(*(client.end(session) for session in ids))
    return {
        "cpu_ms_per_call": CpuMeter.per_item_ms(before, after, len(rtts) + sessions),
        "sessions": sessions,
        "calls": len(rtts),
        "calls_per_s": round(len(rtts) / elapsed, 1),
        "rtt_ms": percentiles(rtts),
        "exec_ms": percentiles([r.exec_ms for r in results]),
        "queue_ms": percentiles([r.queue_ms for r in results]),
        "rebuilt": sum(r.rebuilt for r in results),
    }


async def stateless(client: ToolClient, calls: int, tag: str) -> dict[str, Any]:
    """A fresh jailed program per call through Kafka, 8 at once."""
    rtts: list[float] = []

    async def one(index: int) -> None:
        for call in range(calls // 8):
            rtt, result = await _timed(client, f"{tag}-sl-{index}-{call}", CELL, stateless=True)
            _check(result, "1\n")
            rtts.append(rtt)

    await asyncio.gather(*(one(i) for i in range(8)))
    return {"calls": len(rtts), "rtt_ms": percentiles(rtts)}


def pss_kb(pids: Sequence[int]) -> int:
    """PSS of every process below (and including) the given ones."""
    children = _children()
    below = list(pids)
    for pid in below:  # grows as it goes: every descendant
        below.extend(children.get(pid, []))
    total = 0
    for pid in below:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return total


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return children


async def held(client: ToolClient, pids: Sequence[int], count: int, tag: str) -> dict[str, Any]:
    """Open ``count`` sessions, measure the workers' PSS, read every session back."""
    before = pss_kb(pids)
    ids = [f"{tag}-held-{i}" for i in range(count)]
    gate = asyncio.Semaphore(64)

    async def call(session: str, code: str) -> ToolResult:
        async with gate:
            return await client.run(session, code, limits=LIMITS)

    start = time.perf_counter()
    opened = await asyncio.gather(*(call(s, f"x = {i}") for i, s in enumerate(ids)))
    opened_s = time.perf_counter() - start
    if any(result.status != "ok" for result in opened):
        raise RuntimeError(f"a session did not open: {[r for r in opened if r.status != 'ok'][:3]}")
    await asyncio.sleep(1.0)
    after = pss_kb(pids)
    read = await asyncio.gather(*(call(s, "print(x)") for s in ids))
    right = sum(r.status == "ok" and r.stdout == f"{i}\n" for i, r in enumerate(read))
    rebuilt = sum(r.rebuilt for r in read)
    await asyncio.gather(*(client.end(s) for s in ids))
    return {
        "sessions": count,
        "opened_per_s": round(count / opened_s, 1),
        "read_back_right": right,
        "rebuilt": rebuilt,
        "pss_before_mb": round(before / 1024, 1),
        "pss_after_mb": round(after / 1024, 1),
        "pss_per_session_mb": round((after - before) / 1024 / count, 2),
    }


async def rebuild(client: ToolClient, runs: int, tag: str) -> dict[str, Any]:
    """A session of 10 accepted cells, its interpreter killed, then one more call."""
    replay, rtts = [], []
    for run in range(runs):
        session = f"{tag}-rebuild-{run}"
        for i in range(10):
            _check(await client.run(session, f"v{i} = {i}", limits=LIMITS), "")
        lost = await client.run(session, "import os; os._exit(0)", limits=LIMITS)
        if lost.status != "session_lost":
            raise RuntimeError(f"the interpreter's exit was not session_lost: {lost}")
        rtt, result = await _timed(client, session, "print(sum(v0 for v0 in [v0, v9]))")
        _check(result, "9\n")
        if not result.rebuilt or result.replayed != 10:
            raise RuntimeError(f"not rebuilt from 10 cells: {result}")
        replay.append(result.replay_ms)
        rtts.append(rtt)
        await client.end(session)
    return {"runs": runs, "replay_ms": percentiles(replay), "rtt_ms": percentiles(rtts)}


# -- the run --------------------------------------------------------------------------


async def through_kafka(where: Cluster, plan: Plan) -> dict[str, Any]:
    kafka: KafkaSettings = await fresh_kafka(where.bootstrap, "tools", partitions=8)
    tag = uuid.uuid4().hex[:6]
    # Each worker may hold more than half of --held: sessions hash to partitions unevenly.
    most = max(600, plan.held * 3 // 4)
    extra = ["--max-tool-sessions", str(most)]
    async with workers(kafka, 2, cache_mb=None, tag="tools", extra_args=extra) as pids:
        client = ToolClient(kafka, ToolClientConfig(name=f"bench-{tag}", timeout_s=120.0))
        await client.start()
        meter = CpuMeter(workers=tuple(pids), broker=where.broker_pid)
        try:
            out: dict[str, Any] = {"levels": {}}
            # A fresh broker's JIT and the workers' first sessions: not what a trainer's
            # long run sees. Warm up at 8 sessions, untimed.
            say("warming up")
            await level(client, meter, 8, plan.calls // 4, f"{tag}-warm")
            for sessions in plan.levels:
                say(f"round trips at {sessions} concurrent session(s)")
                out["levels"][str(sessions)] = await level(client, meter, sessions, plan.calls, tag)
            say("stateless calls")
            out["stateless"] = await stateless(client, max(16, plan.calls // 8), tag)
            say(f"holding {plan.held} sessions")
            out["held"] = await held(client, pids, plan.held, tag)
            say("rebuilds by replay")
            out["rebuild"] = await rebuild(client, plan.rebuilds, tag)
            return out
        finally:
            await client.stop()


def targets(result: dict[str, Any]) -> list[Target]:
    at32 = result["kafka"]["levels"].get("32")
    found = []
    if at32:
        found += [
            Target(
                "p50 round trip at 32 sessions",
                at32["rtt_ms"]["p50"],
                TARGET_P50_MS,
                True,
                unit=" ms",
            ),
            Target(
                "p99 round trip at 32 sessions",
                at32["rtt_ms"]["p99"],
                TARGET_P99_MS,
                True,
                unit=" ms",
            ),
        ]
    held_ = result["kafka"]["held"]
    kept = held_["read_back_right"] if held_["rebuilt"] == 0 else 0
    found += [
        Target("sessions held by two workers, none rebuilt", kept, TARGET_HELD, False),
        Target("PSS per session", held_["pss_per_session_mb"], TARGET_PSS_MB, True, unit=" MB"),
    ]
    return found


def _p(percent: dict[str, float], digits: int = 2) -> str:
    return f"p50 {percent['p50']:.{digits}f} ms  p99 {percent['p99']:.{digits}f} ms"


def print_report(result: dict[str, Any]) -> None:
    floor = result["floor"]
    jailed = floor["jailed_process"]["p50"]
    print(f"floor, in process:         {_p(floor['in_process'], 3)}")
    print(f"a fresh jailed process:    {_p(floor['jailed_process'])}")
    print(
        "sessions  calls/s  rtt p50  rtt p99  exec p50  queue p50  rtt p50 / jailed process"
        "  CPU ms/call (workers+sandboxed, broker)"
    )
    for sessions, row in result["kafka"]["levels"].items():
        rtt, cpu = row["rtt_ms"], row["cpu_ms_per_call"]
        print(
            f"{sessions:>8}  {row['calls_per_s']:>7}  {rtt['p50']:>7.2f}  {rtt['p99']:>7.2f}"
            f"  {row['exec_ms']['p50']:>8.2f}  {row['queue_ms']['p50']:>9.2f}"
            f"  {ratio(rtt['p50'], jailed):>6}x"
            f"  {cpu['worker_processes'] + cpu['sandboxed']:.2f}, {cpu.get('broker', 0):.2f}"
        )
    print(f"stateless through Kafka, 8 at once: {_p(result['kafka']['stateless']['rtt_ms'])}")
    held_ = result["kafka"]["held"]
    print(
        f"held {held_['sessions']} sessions: {held_['read_back_right']} read back right, "
        f"{held_['rebuilt']} rebuilt; PSS {held_['pss_before_mb']} -> {held_['pss_after_mb']} MB "
        f"= {held_['pss_per_session_mb']} MB per session"
    )
    rb = result["kafka"]["rebuild"]
    print(f"rebuild of 10 cells: replay {_p(rb['replay_ms'], 1)}; round trip {_p(rb['rtt_ms'], 1)}")
    for target in result["targets_list"]:
        print(target.line())


async def run(args: argparse.Namespace) -> None:
    plan = Plan.make(args.quick, args.held)
    say("floors")
    floor = {
        "in_process": in_process(plan.floor_calls * 10),
        "jailed_process": await jailed_process(plan.floor_calls),
    }
    async with cluster(args.bootstrap_servers) as where:
        kafka = await through_kafka(where, plan)
    result: dict[str, Any] = {"floor": floor, "kafka": kafka, "quick": args.quick}
    found = targets(result)
    print_report({**result, "targets_list": found})
    result["targets"] = {target.name: target.as_json() for target in found}
    emit_json(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer calls and sessions: a smoke run"
    )
    parser.add_argument(
        "--bootstrap-servers", help="an existing cluster (default: embedded broker)"
    )
    parser.add_argument("--held", type=int, help="sessions to hold (default 1000; 40 with --quick)")
    quiet_logs()
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
