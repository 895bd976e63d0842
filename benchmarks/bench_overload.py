"""Overload without collapse: a backlog of 20,000 HumanEval completions dumped at once.

One broker, two sandbox worker processes (worker i pinned to CPU i, concurrency 1,
result cache off), the aggregator in a process of its own, on one set of topics:

1. Peak (the baseline, same run), before and after the overload (load on a shared
   machine drifts; the mean is the peak): 656 completions (every HumanEval canonical
   and broken program, twice) published at once; throughput from the first reward
   to the last, and the CPU each completion cost (workers, sandboxes, broker).
2. Overload: 20,000 distinct completions (the same programs, each copy tagged)
   published as fast as the producer goes, far more than the workers take while
   it publishes (the report says how much more); throughput from the first reward
   to the last, and in 10 s windows.

Throughout, every process's memory is sampled each second (RSS of the broker JVM,
each worker, each worker's zygotes and their executions, the aggregator; open fds
and process counts too). Checked: sustained throughput >= 95 % of the peak, both
in completions/s and in completions per CPU second (what other tenants of a shared
machine hardly disturb: collapse under overload would show as more CPU per
completion); no ``time_limit`` or ``sandbox_error`` verdict and every program
judged right (canonical accepted, broken not); every scored batch complete; each
process's RSS flat (median of the last third of the overload phase within 10 % of
the first third's) and its maximum reported. Queue wait (produce to worker pick-up) at
p50/p99. Prints a table and PASS/FAIL per target, then one JSON object last.

    .venv/bin/python benchmarks/bench_overload.py [--quick] [--backlog N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import (
    CpuMeter,
    Target,
    cluster,
    emit_json,
    fresh_kafka,
    percentiles,
    quiet_logs,
    rate,
    ratio,
    say,
    wait_all,
    workers,
)
from _load import (
    ProcessMonitor,
    aggregator_process,
    humaneval_backlog,
    run_reported,
    windowed_rates,
)

from consumers import ScoredBatches
from producers import HumanEvalSample, RolloutProducer
from rewardbus.runtime.local import RewardWatcher
from schemas import BatchManifest, KafkaSettings

BATCH_SIZE = 256
WINDOW_S = 10.0
WORKERS = 2


@dataclass(frozen=True)
class Plan:
    """Sizes; ``--quick`` is a smoke run."""

    peak: int
    backlog: int
    limit: int | None  # HumanEval problems drawn from
    window_s: float

    @staticmethod
    def make(quick: bool, backlog: int | None) -> Plan:
        if quick:
            return Plan(peak=80, backlog=backlog or 400, limit=20, window_s=2.0)
        return Plan(peak=656, backlog=backlog or 20_000, limit=None, window_s=WINDOW_S)


Batches = list[tuple[BatchManifest, list[HumanEvalSample]]]


async def publish(kafka: KafkaSettings, batches: Batches) -> float:
    """Publish every batch at once (manifests first); seconds it took."""
    started = time.monotonic()
    async with RolloutProducer(kafka) as producer:
        for manifest, _ in batches:
            await producer.publish_manifest(manifest)
        await producer.publish_many(s.completion for _, chunk in batches for s in chunk)
    return time.monotonic() - started


@dataclass(frozen=True)
class Rig:
    """What every phase runs against."""

    kafka: KafkaSettings
    watcher: RewardWatcher
    meter: CpuMeter
    window_s: float


async def phase(rig: Rig, batches: Batches, name: str) -> dict[str, Any]:
    """Dump ``batches`` at once and wait for every reward."""
    watcher = rig.watcher
    ids = [s.completion.sample_id for _, chunk in batches for s in chunk]
    say(f"{name}: publishing {len(ids)} completions at once")
    before = rig.meter.snapshot()
    started = time.monotonic()
    publish_s = await publish(rig.kafka, batches)
    during = sum(1 for i in ids if i in watcher.rewards)
    await wait_all(watcher, ids, timeout_s=max(600.0, len(ids) * 0.2))
    cpu = CpuMeter.per_item_ms(before, rig.meter.snapshot(), len(ids))
    arrivals = [watcher.arrived_at[i] for i in ids]
    first, last = min(arrivals), max(arrivals)
    windows = windowed_rates(arrivals, rig.window_s)
    result: dict[str, Any] = {
        "completions": len(ids),
        "publish_s": round(publish_s, 2),
        "rewards_while_publishing": during,
        "first_reward_s": round(first - started, 2),
        "elapsed_s": round(last - started, 2),
        "completions_per_s": round(rate(len(ids) - 1, last - first), 2),
        "windowed_per_s": windows,
        "queue_ms": percentiles([watcher.rewards[i].queue_ms for i in ids]),
        "exec_ms": percentiles([watcher.rewards[i].exec_ms for i in ids]),
        "verdicts": dict(Counter(str(watcher.rewards[i].verdict) for i in ids)),
        "judged_correctly": sum(
            1
            for _, chunk in batches
            for s in chunk
            if (watcher.rewards[s.completion.sample_id].verdict == "accepted") == s.canonical
        ),
        "per_worker": dict(Counter(watcher.rewards[i].worker_id for i in ids)),
        # Other tenants of a shared machine change the rate, hardly the CPU it costs.
        "cpu_ms_per_completion": cpu,
        "window": (started, last),
    }
    say(f"{name}: {result['completions_per_s']}/s, queue p99 {result['queue_ms']['p99']} ms")
    return result


async def scored_batches(kafka: KafkaSettings, batch_ids: set[str]) -> dict[str, Any]:
    """Read the scored topic until every batch is in: how many are complete."""
    complete, missing = 0, 0
    seen: set[str] = set()
    async with ScoredBatches(kafka) as scored, asyncio.timeout(300):
        while not batch_ids <= seen:
            batch = await scored.next()
            if batch.batch_id in batch_ids and batch.batch_id not in seen:
                seen.add(batch.batch_id)
                complete += batch.complete
                missing += len(batch.missing)
    return {"batches": len(seen), "complete": complete, "missing_samples": missing}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    plan = Plan.make(args.quick, args.backlog)
    tag = uuid.uuid4().hex[:6]
    peaks = [
        humaneval_backlog(plan.peak, tag=f"pk{n}{tag}", batch_size=BATCH_SIZE, limit=plan.limit)
        for n in (1, 2)
    ]
    backlog = humaneval_backlog(plan.backlog, tag=f"ov{tag}", batch_size=BATCH_SIZE,
                                limit=plan.limit)  # fmt: skip
    result: dict[str, Any] = {"plan": {"peak": plan.peak, "backlog": plan.backlog}}
    async with cluster(args.bootstrap_servers) as where:
        kafka = await fresh_kafka(where.bootstrap, "overload")
        async with (
            workers(kafka, WORKERS, cache_mb=0, tag="overload") as pids,
            aggregator_process(kafka) as aggregator_pid,
            RewardWatcher(kafka, lazy=True) as watcher,
        ):
            named = {"aggregator": aggregator_pid}
            if where.broker_pid is not None:
                named["broker"] = where.broker_pid
            monitor = ProcessMonitor(named, {f"worker-{i}": p for i, p in enumerate(pids)})
            stop = asyncio.Event()
            sampling = asyncio.create_task(monitor.run(stop))
            meter = CpuMeter(workers=tuple(pids), broker=where.broker_pid)
            rig = Rig(kafka, watcher, meter, plan.window_s)
            # The peak before and after the overload (load on a shared machine drifts).
            before = await phase(rig, peaks[0], "peak before")
            result["overload"] = await phase(rig, backlog, "overload")
            after = await phase(rig, peaks[1], "peak after")
            stop.set()
            await sampling
            ids = {m.batch_id for m, _ in peaks[0] + backlog + peaks[1]}
            result["scored"] = await scored_batches(kafka, ids)
        start, end = result["overload"].pop("window")
        for run_ in (before, after):
            run_.pop("window")
        result["peak"] = _mean_peak(before, after)
        result["memory"] = monitor.report(start, end)
    return result


_COSTS = ("worker_processes", "sandboxed", "broker")


def _judging_cpu_ms(run_: dict[str, Any]) -> float:
    """CPU ms per completion of the workers, their sandboxes and the broker."""
    return float(sum(run_["cpu_ms_per_completion"].get(k, 0.0) for k in _COSTS))


def _mean_peak(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The two peak runs, their mean rate and CPU cost, and their verdict counts summed."""
    verdicts = Counter(before["verdicts"]) + Counter(after["verdicts"])
    return {
        "before": before,
        "after": after,
        "completions": before["completions"] + after["completions"],
        "judged_correctly": before["judged_correctly"] + after["judged_correctly"],
        "verdicts": dict(verdicts),
        "completions_per_s": round(
            (before["completions_per_s"] + after["completions_per_s"]) / 2, 2
        ),
        "judging_cpu_ms": round((_judging_cpu_ms(before) + _judging_cpu_ms(after)) / 2, 2),
        "queue_ms": after["queue_ms"],
        "exec_ms": after["exec_ms"],
        "publish_s": after["publish_s"],
    }


def targets(result: dict[str, Any]) -> list[tuple[str, Target]]:
    peak, over = result["peak"], result["overload"]
    verdicts = Counter(peak["verdicts"]) + Counter(over["verdicts"])
    rss: dict[str, dict[str, float]] = {
        k: v for k, v in result["memory"].items() if k.endswith("rss_mb")
    }
    worst = max(rss.items(), key=lambda kv: kv[1]["growth"], default=("none", {"growth": 0.0}))
    factor = over["completions"] / max(over["rewards_while_publishing"], 1)
    return [
        ("sustained_over_peak", Target("sustained / peak throughput",
            ratio(over["completions_per_s"], peak["completions_per_s"]), 0.95, at_most=False)),
        ("cpu_sustained_over_peak", Target("peak / overload CPU per completion (rate at equal CPU)",
            ratio(peak["judging_cpu_ms"], _judging_cpu_ms(over)), 0.95, at_most=False)),
        ("backlog_over_publish_capacity", Target("backlog / rewards while publishing",
            round(factor, 1), 10, at_most=False)),
        ("time_limits", Target("time_limit verdicts", verdicts["time_limit"], 0, at_most=True)),
        ("sandbox_errors", Target("sandbox_error verdicts", verdicts["sandbox_error"], 0,
            at_most=True)),
        ("misjudged", Target("programs judged wrong",
            peak["completions"] + over["completions"]
            - peak["judged_correctly"] - over["judged_correctly"], 0, at_most=True)),
        ("incomplete_batches", Target("scored batches incomplete",
            result["scored"]["batches"] - result["scored"]["complete"], 0, at_most=True)),
        ("rss_growth", Target(f"worst RSS growth over the overload ({worst[0]})",
            worst[1]["growth"], 0.10, at_most=True)),
    ]  # fmt: skip


def print_report(result: dict[str, Any]) -> None:
    peak = result["peak"]
    for name, r in (("peak before", peak["before"]), ("overload", result["overload"]),
                    ("peak after", peak["after"])):  # fmt: skip
        print(
            f"{name:11s} {r['completions']:6d} completions  {r['completions_per_s']:7.2f}/s  "
            f"queue p50 {r['queue_ms']['p50']:9.0f} ms p99 {r['queue_ms']['p99']:9.0f} ms  "
            f"exec p50 {r['exec_ms']['p50']:.0f} ms  judging CPU {_judging_cpu_ms(r):.0f} ms "
            f"per completion  published in {r['publish_s']} s"
        )
    windows = result["overload"]["windowed_per_s"]
    if windows:
        print(f"overload windows: min {min(windows)}/s max {max(windows)}/s ({len(windows)})")
    print(f"{'memory (overload phase)':34s} {'first':>8s} {'max':>8s} {'last':>8s} {'growth':>8s}")
    for key, m in result["memory"].items():
        if key.endswith(("rss_mb", "processes", "fds")):
            print(f"  {key:32s} {m['first']:8.1f} {m['max']:8.1f} {m['last']:8.1f} "
                  f"{m['growth']:+8.1%}")  # fmt: skip
    for _, target in targets(result):
        print(target.line())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small backlog: a smoke run")
    parser.add_argument("--backlog", type=int, default=None, help="completions dumped at once")
    parser.add_argument("--bootstrap-servers", help="use this cluster, not an embedded broker")
    args = parser.parse_args(argv)
    quiet_logs()
    result = run_reported(
        name="bench_overload",
        body=run(args),
        report=print_report,
        checks=targets,
        meta={"quick": args.quick},
    )
    if result is not None:
        emit_json(result)


if __name__ == "__main__":
    main()
