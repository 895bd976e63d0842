"""CPU per completion, layer by layer, in one run: the budget issue 17 asks for.

Workload: the 328 HumanEval completions (164 canonical + 164 broken), two at a
time, through four set-ups, each adding one layer to the one before:

- floor: the program (prompt + solution + test + ``check``) compiled in the
  parent, ``os.fork()``, ``exec`` in the child (``bench_sandbox.fork_one``): no
  isolation at all;
- sandbox: the same program as ``python -S -c`` through ``JailSandbox`` as the
  worker builds it (``build_executor``: every isolation layer, the warm pool);
- executor: ``Executor.run`` on the completion (extract, the harness with one
  forked child per test, markers, scoring), on that sandbox;
- pipeline: the completions through Kafka as ``bench_pipeline.py``'s throughput
  phase sends them: the embedded broker, 2 worker processes (one pinned to each
  core, result cache off), the aggregator and a scored-batch reader.

The first three run in a child process pinned to both cores (as the workers
are), so nothing of this process is in their CPU. Each layer's cost is the
difference between a set-up's CPU per completion and the one below it:

    jail               sandbox - floor
    harness, executor  executor - sandbox
    worker service     pipeline workers - executor  (Kafka clients, decode, ledger, spans, emit)
    broker, aggregator the broker JVM + this process (producer, aggregator, reader)

CPU is user + system time from each process's counters and the jails' cgroups
(``_common.CpuMeter``), not wall time. Passes alternate the order of the
set-ups (ABBA); each figure is the median over passes. Also printed: each
set-up's completions/s against the floor's at the same two in flight. Prints a
table and the issue's targets, then one JSON object on the last line.

    .venv/bin/python benchmarks/bench_layers.py [--quick] [--passes 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import CpuMeter, Target, cluster, cpus_for, emit_json, quiet_logs, ratio, say
from bench_pipeline import pipeline
from bench_sandbox import Item, build_items, fork_one, sandbox_runner

from producers import humaneval_samples
from sandbox_workers.jail import JailSandbox

IN_FLIGHT = 2
CHILD_SETUPS = ("floor", "sandbox", "executor")
SETUPS = (*CHILD_SETUPS, "pipeline")
RELAY = "kafka relay"  # a baseline, not a layer: the pipeline with _relay.py for workers
_KAFKA_PARTS = ("workers", "broker", "aggregator")
WARMUP_ITEMS = 8  # untimed, per child: page cache, cgroup slots, the pool's zygotes


# -- the set-ups run in a pinned child ---------------------------------------------------


def _rusage_cpu_s() -> float:
    """This process's CPU and its reaped children's (the floor's forks)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _floor(items: Sequence[Item]) -> dict[str, Any]:
    """``fork_one`` from two threads; CPU from rusage (the forks are reaped children)."""
    queue = list(reversed(items))
    lock = threading.Lock()
    wrong = [0]

    def drain() -> None:
        while True:
            with lock:
                if not queue:
                    return
                item = queue.pop()
            status = fork_one(item)
            if (status == 0) != item.sample.canonical:
                with lock:
                    wrong[0] += 1

    before, started = _rusage_cpu_s(), time.monotonic()
    threads = [threading.Thread(target=drain) for _ in range(IN_FLIGHT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    cpu_ms = 1000 * (_rusage_cpu_s() - before) / len(items)
    return {"elapsed_s": elapsed, "cpu_ms": {"workers": round(cpu_ms, 3)}, "wrong": wrong[0]}


async def _in_flight(items: Sequence[Item], one: Callable[[Item], Awaitable[bool]]) -> int:
    """Each item through ``one``, two at a time; how many were judged wrong."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def judged(item: Item) -> bool:
        async with gate:
            return await one(item)

    return sum(not ok for ok in await asyncio.gather(*(judged(item) for item in items)))


async def _jailed(setup: str, items: Sequence[Item]) -> dict[str, Any]:
    """The sandbox or the executor, built as a worker builds them, measured by CpuMeter."""
    from rewardbus.wiring import SandboxOptions, build_executor

    executor = build_executor(SandboxOptions(strict=True, worker_id=f"bench-layers-{setup}"))
    sandbox = executor.sandbox
    assert isinstance(sandbox, JailSandbox)

    async def judged(item: Item) -> bool:
        event = await executor.run(item.sample.completion)
        return (event.score == 1.0) == item.sample.canonical

    one = sandbox_runner(sandbox) if setup == "sandbox" else judged
    try:
        await _in_flight(items[:WARMUP_ITEMS], one)
        meter = CpuMeter(workers=(os.getpid(),), include_self=False)
        before, started = meter.snapshot(), time.monotonic()
        wrong = await _in_flight(items, one)
        elapsed = time.monotonic() - started
        spent = CpuMeter.per_item_ms(before, meter.snapshot(), len(items))
    finally:
        await executor.aclose()
    cpu = {"workers": spent["worker_processes"], "sandboxed": spent["sandboxed"]}
    return {"elapsed_s": elapsed, "cpu_ms": cpu, "wrong": wrong}


def child_main(setup: str, limit: int | None) -> None:
    """In the pinned child: one set-up over the items, one JSON line."""
    items = build_items(limit)
    result = _floor(items) if setup == "floor" else asyncio.run(_jailed(setup, items))
    result["completions"] = len(items)
    print(json.dumps(result), flush=True)


async def in_child(setup: str, limit: int | None) -> dict[str, Any]:
    cpus = set(cpus_for(IN_FLIGHT))
    argv = [sys.executable, __file__, "--child", setup]
    if limit is not None:
        argv += ["--limit", str(limit)]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, preexec_fn=lambda: os.sched_setaffinity(0, cpus)
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"bench_layers: the {setup} set-up failed with status {proc.returncode}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


# -- the pipeline ---------------------------------------------------------------------------


async def through_pipeline(
    where: Any, limit: int | None, *, relay_period_ms: float | None = None
) -> dict[str, Any]:
    samples = humaneval_samples(limit=limit)
    run = await pipeline(where, IN_FLIGHT, samples, relay_period_ms=relay_period_ms)
    spent = run["cpu_ms_per_completion"]
    return {
        "elapsed_s": run["elapsed_s"],
        "completions": run["completions"],
        # The relay judges nothing: its placeholder rewards are not verdicts.
        "wrong": 0 if relay_period_ms is not None else run["completions"] - run["judged_correctly"],
        "cpu_ms": {
            "workers": spent["worker_processes"],
            "sandboxed": spent["sandboxed"],
            "broker": spent.get("broker", 0.0),
            "aggregator": spent["bench_process"],
            "unattributed": spent["unattributed"],
        },
    }


# -- the table ------------------------------------------------------------------------------


def _worker_side(run: dict[str, Any]) -> float:
    return float(run["cpu_ms"]["workers"] + run["cpu_ms"].get("sandboxed", 0.0))


def layers(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians over passes: each set-up's CPU and rate, each layer's share."""

    def median(setup: str, value: Callable[[dict[str, Any]], float]) -> float:
        return statistics.median(value(run) for run in runs[setup])

    cost = {setup: median(setup, _worker_side) for setup in SETUPS}
    infra = median("pipeline", lambda r: r["cpu_ms"]["broker"] + r["cpu_ms"]["aggregator"])
    per_s = {s: median(s, lambda r: r["completions"] / r["elapsed_s"]) for s in SETUPS}
    floor = cost["floor"]
    share = {
        "floor": floor,
        "jail": cost["sandbox"] - floor,
        "harness and executor": cost["executor"] - cost["sandbox"],
        "worker service": cost["pipeline"] - cost["executor"],
        "broker and aggregator": infra,
    }
    total = cost["pipeline"] + infra
    # Kafka alone: the relay's processes, the broker and the aggregator, nothing judged.
    kafka = median(RELAY, lambda r: sum(r["cpu_ms"][k] for k in _KAFKA_PARTS))
    bound = floor + share["jail"] + kafka
    return {
        "cpu_ms": {k: round(v, 3) for k, v in share.items()},
        "cpu_over_floor": {k: ratio(v, floor) for k, v in share.items()},
        "setup_cpu_ms": {k: round(v, 3) for k, v in cost.items()},
        "total_cpu_ms": round(total, 3),
        "total_over_floor": ratio(total, floor),
        "per_s": {k: round(v, 1) for k, v in per_s.items()},
        "per_s_over_floor": {k: ratio(v, per_s["floor"]) for k, v in per_s.items()},
        "kafka_alone": {
            "cpu_ms": {
                part: round(median(RELAY, lambda r, part=part: r["cpu_ms"][part]), 3)
                for part in _KAFKA_PARTS
            },
            "total_cpu_ms": round(kafka, 3),
            "total_over_floor": ratio(kafka, floor),
            "per_s": round(median(RELAY, lambda r: r["completions"] / r["elapsed_s"]), 1),
            "period_ms": round(median(RELAY, lambda r: r["period_ms"]), 3),
            "floor_jail_kafka_cpu_ms": round(bound, 3),
            "floor_jail_kafka_over_floor": ratio(bound, floor),
        },
    }


def targets(table: dict[str, Any]) -> list[tuple[str, Target]]:
    rates = table["per_s_over_floor"]
    return [
        ("executor_rate", Target(
            "executor, 2 in flight, completions/s vs the fork floor's", rates["executor"], 0.6,
            at_most=False, unit="x")),
        ("pipeline_rate", Target(
            "pipeline, 2 workers, completions/s vs the fork floor's", rates["pipeline"], 0.45,
            at_most=False, unit="x")),
        ("pipeline_cpu", Target(
            "pipeline CPU per completion vs the fork floor's", table["total_over_floor"], 2.5,
            at_most=True, unit="x")),
    ]  # fmt: skip


def print_table(table: dict[str, Any], passes: int, completions: int) -> None:
    print(f"CPU ms per completion by layer, {completions} HumanEval completions, "
          f"{IN_FLIGHT} in flight, median of {passes} pass(es)")  # fmt: skip
    print(f"  {'layer':24} {'CPU ms':>8} {'x floor':>8}")
    for name, value in table["cpu_ms"].items():
        print(f"  {name:24} {value:8.2f} {table['cpu_over_floor'][name]:8.2f}")
    print(f"  {'whole pipeline':24} {table['total_cpu_ms']:8.2f} {table['total_over_floor']:8.2f}")
    print(f"  {'set-up':24} {'CPU ms':>8} {'per s':>8} {'x floor':>8}")
    for setup in SETUPS:
        cpu, rate = table["setup_cpu_ms"][setup], table["per_s"][setup]
        print(f"  {setup:24} {cpu:8.2f} {rate:8.1f} {table['per_s_over_floor'][setup]:8.2f}")
    alone = table["kafka_alone"]
    cpu = alone["cpu_ms"]
    print(
        f"Kafka alone ({RELAY}: consume, answer at a worker's pace, "
        "judge nothing): "
        f"{alone['total_cpu_ms']:.2f} ms (relays {cpu['workers']:.2f}, broker "
        f"{cpu['broker']:.2f}, this process {cpu['aggregator']:.2f}) = "
        f"{alone['total_over_floor']:.2f}x floor, {alone['per_s']:.1f}/s"
    )
    print(f"  floor + jail + Kafka alone: {alone['floor_jail_kafka_cpu_ms']:.2f} ms = "
          f"{alone['floor_jail_kafka_over_floor']:.2f}x floor (the pipeline, with no harness, "
          "executor or worker service of ours)")  # fmt: skip
    print("targets:")
    for _, target in targets(table):
        print(target.line())


async def run(args: argparse.Namespace) -> None:
    limit = 10 if args.quick else None
    passes = 1 if args.quick else args.passes
    runs: dict[str, list[dict[str, Any]]] = {setup: [] for setup in (*SETUPS, RELAY)}
    started = time.monotonic()
    async with cluster(None) as where:
        if not args.quick:
            # The broker's JIT and heap: a first pass on a fresh broker costs 10-30 % more.
            say("pipeline warm-up pass (not counted)")
            await through_pipeline(where, limit)
        for index in range(passes):
            # The relay right after the pipeline, at its rate: each relay holds a record
            # as long as a worker of that pipeline took per completion.
            order = (*SETUPS, RELAY) if index % 2 == 0 else ("pipeline", RELAY, *SETUPS[-2::-1])
            for setup in order:
                say(f"pass {index + 1} of {passes}: {setup}")
                if setup == "pipeline":
                    result = await through_pipeline(where, limit)
                elif setup == RELAY:
                    piped = runs["pipeline"][-1]
                    period_ms = 1000 * IN_FLIGHT * piped["elapsed_s"] / piped["completions"]
                    result = await through_pipeline(where, limit, relay_period_ms=period_ms)
                    result["period_ms"] = round(period_ms, 3)
                else:
                    result = await in_child(setup, limit)
                if result["wrong"]:
                    raise SystemExit(f"bench_layers: {setup} judged {result['wrong']} wrong")
                runs[setup].append(result)
    table = layers(runs)
    print_table(table, passes, runs["floor"][0]["completions"])
    table["targets"] = {key: t.as_json() for key, t in targets(table)}
    table["runs"] = runs
    table["meta"] = {
        "benchmark": "bench_layers",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": args.quick,
        "passes": passes,
        "wall_s": round(time.monotonic() - started, 1),
    }
    emit_json(table)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 problems, one pass: a smoke run")
    parser.add_argument("--passes", type=int, default=2, help="passes, order alternated")
    # Internal: a set-up measured in a pinned child process of its own.
    parser.add_argument("--child", choices=CHILD_SETUPS, help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quiet_logs()
    if args.child:
        child_main(args.child, args.limit)
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
