"""Soak: N minutes (default 30) of HumanEval load at ~70 % of the peak, watching for leaks.

Not run in CI (it takes half an hour). One broker, two sandbox worker processes
(pinned, concurrency 1, result cache off), the aggregator in a process of its own:

1. Peak, measured first in the same run: 656 completions published at once;
   throughput from the first reward to the last.
2. Soak: every ``--tick`` seconds one batch of distinct HumanEval completions
   (canonical and broken programs, each copy tagged) sized so the offered load is
   ``--load`` (0.7) of that peak, for ``--minutes``.

Every ``--sample`` seconds: RSS and open fds of the broker JVM, each worker, each
worker's zygotes (the processes below it alive for the whole soak), the aggregator;
the count of zygotes and of the transient processes executions come and go with.
Every ``--heap-sample`` seconds: the broker's live heap (used after a full GC, via
``jcmd``).

The embedded broker runs as production Kafka is run, its heap committed at start
(-Xms = -Xmx, AlwaysPreTouch): a JVM's RSS otherwise climbs for an hour while its heap
fills towards -Xmx (+16 % in the first 30-minute run), which tells nothing of a leak.
So its RSS measures the memory outside the heap, and its live heap the inside.

Checked: every process's RSS and the broker's live heap flat within 10 % (median of
the last third of the soak against the first third's, after a 10 % warm-up); no
growth in fds or processes (same medians, within 10 % of noise); every reward in and
every scored batch complete; no ``sandbox_error``; the reward rate kept up with the
offered rate. Prints a table, PASS/FAIL per target, then one JSON object last.

    .venv/bin/python benchmarks/bench_soak.py [--minutes 30] [--load 0.7]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import (
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
    humaneval_stream,
    run_reported,
)

from consumers import ScoredBatches
from producers import HumanEvalSample, RolloutProducer, build_batches
from rewardbus.runtime.local import RewardWatcher
from schemas import KafkaSettings

WORKERS = 2
PEAK_COMPLETIONS = 656
GROWTH_LIMIT = 0.10


async def measure_peak(kafka: KafkaSettings, watcher: RewardWatcher, count: int) -> float:
    """Completions per second with ``count`` published at once (first to last reward)."""
    batches = humaneval_backlog(count, tag=f"pk{uuid.uuid4().hex[:6]}", batch_size=256)
    ids = [s.completion.sample_id for _, chunk in batches for s in chunk]
    async with RolloutProducer(kafka) as producer:
        for manifest, chunk in batches:
            await producer.publish_manifest(manifest)
            await producer.publish_many(s.completion for s in chunk)
    await wait_all(watcher, ids, timeout_s=600)
    arrivals = [watcher.arrived_at[i] for i in ids]
    return rate(len(ids) - 1, max(arrivals) - min(arrivals))


async def paced(
    kafka: KafkaSettings, stream: Iterator[HumanEvalSample], per_tick: int, args: argparse.Namespace
) -> tuple[list[str], set[str], float]:
    """One batch of ``per_tick`` completions every tick, on an absolute schedule, for
    ``args.minutes``; the sample ids, batch ids, and the seconds it took."""
    ticks = int(args.minutes * 60 / args.tick)
    ids: list[str] = []
    batch_ids: set[str] = set()
    started = time.monotonic()
    async with RolloutProducer(kafka) as producer:
        for tick in range(ticks):
            chunk = list(itertools.islice(stream, per_tick))
            run_id = f"soak{tick:05d}"
            for manifest, stamped in build_batches(chunk, batch_size=per_tick, run_id=run_id,
                                                   deadline_s=3600):  # fmt: skip
                await producer.publish_manifest(manifest)
                await producer.publish_many(s.completion for s in stamped)
                ids.extend(s.completion.sample_id for s in stamped)
                batch_ids.add(manifest.batch_id)
            if tick % max(1, ticks // 10) == 0:
                say(f"soak: tick {tick}/{ticks}, {len(ids)} published")
            delay = started + (tick + 1) * args.tick - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule: the load's pace, not a wait
    return ids, batch_ids, time.monotonic() - started


async def scored_complete(kafka: KafkaSettings, batch_ids: set[str]) -> dict[str, int]:
    complete = 0
    seen: set[str] = set()
    async with ScoredBatches(kafka) as scored, asyncio.timeout(600):
        while not batch_ids <= seen:
            batch = await scored.next()
            if batch.batch_id in batch_ids and batch.batch_id not in seen:
                seen.add(batch.batch_id)
                complete += batch.complete
    return {"batches": len(seen), "complete": complete}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"minutes": args.minutes, "load": args.load}
    async with cluster(args.bootstrap_servers, preallocate_heap=True) as where:
        kafka = await fresh_kafka(where.bootstrap, "soak")
        async with (
            workers(kafka, WORKERS, cache_mb=0, tag="soak") as pids,
            aggregator_process(kafka) as aggregator_pid,
            RewardWatcher(kafka, lazy=True) as watcher,
        ):
            named = {"aggregator": aggregator_pid}
            if where.broker_pid is not None:
                named["broker"] = where.broker_pid
            monitor = ProcessMonitor(
                named,
                {f"worker-{i}": p for i, p in enumerate(pids)},
                interval_s=args.sample,
                jvms=["broker"] if "broker" in named else [],
                heap_interval_s=args.heap_sample,
            )
            peak = await measure_peak(kafka, watcher, PEAK_COMPLETIONS)
            per_tick = max(2, 2 * round(args.load * peak * args.tick / 2))  # whole groups
            say(f"peak {peak:.1f}/s; soak at {per_tick / args.tick:.1f}/s for {args.minutes} min")
            stop = asyncio.Event()
            sampling = asyncio.create_task(monitor.run(stop))
            soak_start = time.monotonic()
            stream = humaneval_stream(tag=f"sk{uuid.uuid4().hex[:6]}")
            ids, batch_ids, publish_s = await paced(kafka, stream, per_tick, args)
            await wait_all(watcher, ids, timeout_s=600)
            soak_end = time.monotonic()
            stop.set()
            await sampling
            result["scored"] = await scored_complete(kafka, batch_ids)
        events = [watcher.rewards[i] for i in ids]
        arrivals = [watcher.arrived_at[i] for i in ids]
        result.update(
            peak_per_s=round(peak, 2),
            offered_per_s=round(per_tick / args.tick, 2),
            completions=len(ids),
            publish_s=round(publish_s, 1),
            rewarded_per_s=round(rate(len(ids), max(arrivals) - soak_start), 2),
            drain_after_publish_s=round(soak_end - soak_start - publish_s, 1),
            queue_ms=percentiles([e.queue_ms for e in events]),
            exec_ms=percentiles([e.exec_ms for e in events]),
            verdicts=dict(Counter(str(e.verdict) for e in events)),
            memory=monitor.report(soak_start, soak_end),
        )
    return result


def _worst(memory: dict[str, Any], suffixes: tuple[str, ...]) -> tuple[str, float]:
    picked = {k: v["growth"] for k, v in memory.items() if k.endswith(suffixes)}
    return max(picked.items(), key=lambda kv: abs(kv[1]), default=("none", 0.0))


def targets(result: dict[str, Any]) -> list[tuple[str, Target]]:
    memory = result["memory"]
    rss_name, rss = _worst(memory, ("rss_mb",))
    heap_name, heap = _worst(memory, ("live_heap_mb",))
    fd_name, fds = _worst(memory, ("fds",))
    proc_name, procs = _worst(memory, ("processes",))
    return [
        ("rss_flat", Target(f"worst RSS change ({rss_name})", abs(rss), GROWTH_LIMIT,
            at_most=True)),
        ("live_heap_flat", Target(f"worst live heap change ({heap_name})", abs(heap),
            GROWTH_LIMIT, at_most=True)),
        ("fds_flat", Target(f"worst fd count change ({fd_name})", fds, GROWTH_LIMIT,
            at_most=True)),
        ("processes_flat", Target(f"worst process count change ({proc_name})", procs,
            GROWTH_LIMIT, at_most=True)),
        ("kept_up", Target("rewarded / offered rate", ratio(result["rewarded_per_s"],
            result["offered_per_s"]), 0.95, at_most=False)),
        ("sandbox_errors", Target("sandbox_error verdicts",
            result["verdicts"].get("sandbox_error", 0), 0, at_most=True)),
        ("incomplete_batches", Target("scored batches incomplete",
            result["scored"]["batches"] - result["scored"]["complete"], 0, at_most=True)),
    ]  # fmt: skip


def print_report(result: dict[str, Any]) -> None:
    print(
        f"peak {result['peak_per_s']}/s; offered {result['offered_per_s']}/s for "
        f"{result['minutes']} min; rewarded {result['rewarded_per_s']}/s; "
        f"queue p50 {result['queue_ms']['p50']} ms p99 {result['queue_ms']['p99']} ms"
    )
    print(f"{'soak':34s} {'first':>8s} {'max':>8s} {'last':>8s} {'change':>8s}")
    for key, m in result["memory"].items():
        print(f"  {key:32s} {m['first']:8.1f} {m['max']:8.1f} {m['last']:8.1f} "
              f"{m['growth']:+8.1%}")  # fmt: skip
    for _, target in targets(result):
        print(target.line())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the soak lasts")
    parser.add_argument("--load", type=float, default=0.7, help="offered load, share of peak")
    parser.add_argument("--tick", type=float, default=2.0, help="seconds between batches")
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    parser.add_argument(
        "--heap-sample",
        type=float,
        default=60.0,
        help="seconds between the broker's live-heap samples (a full GC each)",
    )
    parser.add_argument("--bootstrap-servers", help="use this cluster, not an embedded broker")
    args = parser.parse_args(argv)
    quiet_logs()
    result = run_reported(name="bench_soak", body=run(args), report=print_report, checks=targets)
    if result is not None:
        emit_json(result)


if __name__ == "__main__":
    main()
