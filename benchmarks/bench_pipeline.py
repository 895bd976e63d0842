"""Throughput and latency of the whole pipeline, against the executor alone in the same run.

Four measurements, each on fresh topics (a new uuid prefix per phase):

1. Throughput. The 328 HumanEval programs (164 canonical + 164 broken) through
   Kafka → 1 or 2 sandbox worker processes (worker i pinned to CPU i: one core's
   budget each; concurrency 1; result cache off) → rewards → the aggregator →
   scored batches. Baseline: the executor alone (``build_executor``, in a
   process of its own pinned the same way) judging the same 328 completions 1
   and 2 at a time. Executor-alone at 2 in one process is the fair comparison
   for 2 workers. Configurations run in ABBA order (forward, then reversed) so
   linear load drift on a shared machine cancels; the mean is reported.
2. Latency for trivial programs (``print(int(input())+1)``, distinct code per
   sample) at half of saturation: saturated throughput first, then evenly
   spaced sends at 50 % of it for 1 s of warm-up (reported apart) and ~10 s
   measured; p50/p99 produce→reward; then the same at a tenth of saturation, to
   show what is left when executions do not wait for a core.
3. The result cache: N completions of which each distinct program appears
   twice, against N all-distinct ones (cache on; fresh workers, warmed up on 16
   trivial programs first); time-to-all-rewards ratio, two runs each in ABBA order.
4. Makespan: three adversarial batches, each publishing its longest samples last
   (one 0.8 s sample after 63 trivial ones; a group of eight 0.2 s samples after
   seven trivial groups; 48 heavy-tailed lengths shortest first), each alone through
   2 workers and the aggregator: first publish -> scored batch, against the list-
   scheduling bound (total execution time / 2 + the longest sample's).

In phases 1 and 3 the reward watcher is lazy: it fetches at most every 100 ms
and dates each reward by its record timestamp (the worker's produce time), so
the instrument does not add a broker fetch per reward to the load it measures.
Phase 2 measures latency, so its watcher fetches each reward at once and dates
it on arrival.

Every run also records CPU ms per completion by component (benchmark process
with producer and aggregator, broker JVM, worker processes, sandboxed
executions, unattributed = kernel work and other tenants): the "CPU model"
derived from it says what the ratios would be without other load, and where
the time goes. Prints a table and each target from the issue with PASS/FAIL,
then one JSON object on the last line.

    .venv/bin/python benchmarks/bench_pipeline.py [--quick] [--bootstrap-servers HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import (
    Cluster,
    CpuMeter,
    Target,
    Timeline,
    cluster,
    cpus_for,
    emit_json,
    fresh_kafka,
    percentiles,
    publish_timed,
    quiet_logs,
    rate,
    ratio,
    relays,
    say,
    stage_breakdown,
    wait_all,
    workers,
)

from consumers import ScoredBatches
from producers import HumanEvalSample, RolloutProducer, build_batches, humaneval_samples
from rewardbus.runtime.local import RewardWatcher, aggregator
from schemas import BatchManifest, Completion, IoSuite, RewardEvent

BATCH_SIZE = 32
# Pacing starts right after the saturated burst; its first second is reported apart
# and not counted: after the throughput phase the broker was seen to stall for
# ~0.2 s at that transition (queue waits up to 160 ms), which says nothing about
# steady latency at half of saturation.
PACED_WARMUP_S = 1.0
TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Plan:
    """How big each phase is; ``--quick`` shrinks everything for a smoke run."""

    humaneval_limit: int | None  # problems; each gives 2 completions
    repeats: int  # ABBA passes of the throughput comparison
    trivial_saturation: int  # trivial completions published at once
    paced_seconds: float
    cache_n: int  # completions per cache batch

    @staticmethod
    def make(quick: bool) -> Plan:
        if quick:
            return Plan(20, 1, 80, 3.0, 40)
        return Plan(None, 2, 300, 10.0, 328)


# -- 1. throughput: the executor alone ------------------------------------------


async def executor_alone_main(concurrency: int, limit: int | None) -> None:
    """The baseline, run in its own (pinned) process: judge every sample, print one JSON line."""
    from rewardbus.wiring import SandboxOptions, build_executor

    executor = build_executor(SandboxOptions(strict=True, worker_id="bench-executor-alone"))
    completions = [s.completion for s in humaneval_samples(limit=limit)]
    gate = asyncio.Semaphore(concurrency)

    async def judge(completion: Completion) -> RewardEvent:
        async with gate:
            return await executor.run(completion)

    meter = CpuMeter(workers=(os.getpid(),), include_self=False)
    before = meter.snapshot()
    started = time.monotonic()
    events = await asyncio.gather(*(judge(c) for c in completions))
    elapsed = time.monotonic() - started
    cpu = CpuMeter.per_item_ms(before, meter.snapshot(), len(events))
    result = {
        "completions": len(events),
        "elapsed_s": round(elapsed, 3),
        "completions_per_s": round(rate(len(events), elapsed), 2),
        "exec_ms": percentiles([e.exec_ms for e in events]),
        "accepted": sum(1 for e in events if e.verdict == "accepted"),
        "cpu_ms_per_completion": cpu,
    }
    print(json.dumps(result), flush=True)


async def executor_alone(concurrency: int, limit: int | None) -> dict[str, Any]:
    """Run the baseline in a child process pinned to ``concurrency`` CPUs, like the workers."""
    cpus = set(cpus_for(concurrency))
    argv = [sys.executable, __file__, "--executor-alone", str(concurrency)]
    if limit is not None:
        argv += ["--limit", str(limit)]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"executor-alone run failed with status {proc.returncode}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    say(f"executor alone, {concurrency} at a time: {result['completions_per_s']}/s")
    return result


# -- 1. throughput: the pipeline --------------------------------------------------


async def pipeline(
    where: Cluster,
    count: int,
    samples: list[HumanEvalSample],
    *,
    standby_s: float = 0.0,
    relay_period_ms: float | None = None,
) -> dict[str, Any]:
    """Publish every sample in batches; wait for every reward and every scored batch.

    ``standby_s`` > 0 (``cpu_guard.py``): first measure each component's CPU per
    second with every client up and nothing to do (``cpu_standby_ms_per_s``), and
    report how long the measured window was (``cpu_window_s``). ``relay_period_ms``:
    Kafka relays that judge nothing (``_relay.py``, each answering one record per that long at most)
    where the workers would be.
    """
    kafka = await fresh_kafka(where.bootstrap, f"pipe{count}", partitions=max(4, 2 * count))
    run_id = uuid.uuid4().hex[:8]
    batches = list(build_batches(samples, batch_size=BATCH_SIZE, run_id=run_id, deadline_s=600))
    stamped = [s for _, chunk in batches for s in chunk]
    timeline = Timeline()
    async with (
        (
            workers(kafka, count, cache_mb=0, tag=f"pipe{count}")
            if relay_period_ms is None
            else relays(kafka, count, relay_period_ms)
        ) as pids,
        aggregator(kafka, f"{kafka.topics.prefix}aggregator"),
        ScoredBatches(kafka, group_id=f"{kafka.topics.prefix}learner") as scored,
        RewardWatcher(kafka, lazy=True) as watcher,
    ):
        meter = CpuMeter(workers=tuple(pids), broker=where.broker_pid)
        standby = await meter.standby_ms_per_s(standby_s) if standby_s else None
        before, window_started = meter.snapshot(), time.monotonic()
        async with RolloutProducer(kafka) as producer:
            for manifest, chunk in batches:
                await producer.publish_manifest(manifest)
                await publish_timed(producer, (s.completion for s in chunk), timeline)
        scored_at = await _collect_scored(scored, {m.batch_id for m, _ in batches})
        await wait_all(watcher, timeline.sent_at, TIMEOUT_S)
        cpu = CpuMeter.per_item_ms(before, meter.snapshot(), len(stamped))
        window_s = time.monotonic() - window_started
    result = _pipeline_result(count, stamped, timeline, watcher, scored_at)
    result["cpu_ms_per_completion"] = cpu
    if standby is not None:
        result["cpu_standby_ms_per_s"] = standby
        result["cpu_window_s"] = round(window_s, 3)
    return result


async def _collect_scored(scored: ScoredBatches, batch_ids: set[str]) -> dict[str, float]:
    """Arrival time of each sample's scored batch."""
    arrived_at: dict[str, float] = {}
    seen: set[str] = set()
    async with asyncio.timeout(TIMEOUT_S):
        async for batch in scored:
            now = time.monotonic()
            seen.add(batch.batch_id)
            for sample in batch.samples:
                arrived_at.setdefault(sample.sample_id, now)
            if batch_ids <= seen:
                break
    return arrived_at


def _pipeline_result(
    count: int,
    samples: list[HumanEvalSample],
    timeline: Timeline,
    watcher: RewardWatcher,
    scored_at: dict[str, float],
) -> dict[str, Any]:
    reward_ms = timeline.reward_ms(watcher)
    scored_ms = [(t - timeline.sent_at[k]) * 1000 for k, t in scored_at.items()]
    span = timeline.span_s(watcher)
    verdict = {
        s.completion.sample_id: watcher.rewards[s.completion.sample_id].verdict for s in samples
    }
    correct = sum(
        1 for s in samples if (verdict[s.completion.sample_id] == "accepted") == s.canonical
    )
    result = {
        "workers": count,
        "completions": len(samples),
        "elapsed_s": round(span, 3),
        "completions_per_s": round(rate(len(samples), span), 2),
        "produce_to_reward_ms": percentiles(list(reward_ms.values())),
        "produce_to_scored_batch_ms": percentiles(scored_ms),
        "stages": stage_breakdown(watcher.rewards.values(), reward_ms),
        "judged_correctly": correct,
        "cache_hits": sum(1 for e in watcher.rewards.values() if e.cache_hit),
        # An uneven split of partitions' records makes one worker finish last.
        "per_worker": dict(Counter(e.worker_id for e in watcher.rewards.values())),
    }
    tput = result["completions_per_s"]
    if set(verdict.values()) == {"sandbox_error"}:  # _relay.py's placeholders
        say(f"pipeline, {count} Kafka relay(s), nothing judged: {tput}/s")
    else:
        say(f"pipeline, {count} worker(s): {tput}/s, {correct}/{len(samples)} judged right")
    return result


async def throughput(where: Cluster, plan: Plan) -> dict[str, Any]:
    """Executor alone and pipeline at 1 and 2, in ABBA order; means over the passes."""
    samples = humaneval_samples(limit=plan.humaneval_limit)
    order = [("executor", 1), ("pipeline", 1), ("executor", 2), ("pipeline", 2)]
    runs: dict[str, list[dict[str, Any]]] = {f"{kind}_{n}": [] for kind, n in order}
    for index in range(plan.repeats):
        for kind, n in order if index % 2 == 0 else list(reversed(order)):
            if kind == "executor":
                result = await executor_alone(n, plan.humaneval_limit)
            else:
                result = await pipeline(where, n, samples)
            runs[f"{kind}_{n}"].append(result)
    mean = {k: statistics.fmean(r["completions_per_s"] for r in v) for k, v in runs.items()}
    return {
        "mean_completions_per_s": {k: round(v, 2) for k, v in mean.items()},
        "cpu_model": cpu_model(runs, broker_measured=where.broker_pid is not None),
        "pipeline_over_executor_1": ratio(mean["pipeline_1"], mean["executor_1"]),
        "pipeline_over_executor_2": ratio(mean["pipeline_2"], mean["executor_2"]),
        "scaling_2_over_1_workers": ratio(mean["pipeline_2"], mean["pipeline_1"]),
        "executor_scaling_2_over_1": ratio(mean["executor_2"], mean["executor_1"]),
        "runs": runs,
    }


def cpu_model(runs: dict[str, list[dict[str, Any]]], *, broker_measured: bool) -> dict[str, Any]:
    """Ratios predicted from CPU ms per completion, which other tenants barely disturb.

    Wall-clock ratios on a shared 2-core machine move with whatever else runs;
    CPU spent per completion by each component does not. From it: the
    pipeline/executor ratio when everything shares this machine's cores, and
    when the broker and aggregator run elsewhere (as in production); and the
    2-worker/1-worker scaling this machine allows (1 worker leaves the second
    core to the broker and the aggregator; 2 workers share both cores with them).
    With an external cluster the broker's CPU is not seen (it is elsewhere, or
    lands in "unattributed"): the model then covers the aggregator alone.
    """

    def cost(key: str, parts: tuple[str, ...]) -> float:
        return statistics.fmean(
            sum(r["cpu_ms_per_completion"].get(p, 0.0) for p in parts) for r in runs[key]
        )

    worker = ("worker_processes", "sandboxed")
    executor = statistics.fmean(cost(f"executor_{n}", worker) for n in (1, 2))
    pipe_worker = statistics.fmean(cost(f"pipeline_{n}", worker) for n in (1, 2))
    infra = statistics.fmean(cost(f"pipeline_{n}", ("broker", "bench_process")) for n in (1, 2))
    cores = len(os.sched_getaffinity(0))
    one_worker = min(1000 / pipe_worker, (cores - 1) * 1000 / max(infra, 1e-9))
    two_workers = min(2000 / pipe_worker, cores * 1000 / (pipe_worker + infra))
    return {
        "executor_cpu_ms": round(executor, 2),
        "pipeline_worker_cpu_ms": round(pipe_worker, 2),
        "pipeline_broker_and_aggregator_cpu_ms": round(infra, 2),
        "ratio_shared_cores": ratio(executor, pipe_worker + infra),
        "ratio_kafka_elsewhere": ratio(executor, pipe_worker),
        "scaling_2_over_1_this_machine": ratio(two_workers, one_worker),
        "broker_measured": broker_measured,
    }


# -- 2. trivial programs at half saturation -----------------------------------------


def trivial(tag: str, index: int, batch: str) -> Completion:
    """A one-test stdin program; the comment makes its code (and cache key) unique."""
    return Completion(
        sample_id=f"{tag}-{index}",
        batch_id=batch,
        group_id=f"{tag}-{index}",
        language="python",
        code=f"# {tag} sample {index}\nprint(int(input()) + 1)\n",
        tests=IoSuite(inputs=[f"{index}\n"], outputs=[f"{index + 1}\n"]),
    )


def trivial_batch(count: int) -> list[Completion]:
    tag = uuid.uuid4().hex[:8]
    return [trivial(tag, i, f"{tag}-b{i // BATCH_SIZE}") for i in range(count)]


async def saturated(producer: RolloutProducer, watcher: RewardWatcher, count: int) -> float:
    """Completions/s with ``count`` trivial programs published at once."""
    timeline = Timeline()
    await publish_timed(producer, trivial_batch(count), timeline)
    await wait_all(watcher, timeline.sent_at, TIMEOUT_S)
    return rate(count, timeline.span_s(watcher))


async def paced(
    producer: RolloutProducer,
    watcher: RewardWatcher,
    per_s: float,
    seconds: float,
    warmup_s: float,
) -> tuple[Timeline, Timeline]:
    """Evenly spaced sends at ``per_s`` for ``warmup_s + seconds``; acks awaited off the
    pacing path. Returns the warm-up's timeline and the measured one."""
    warmup_count = round(per_s * warmup_s)
    batch = trivial_batch(warmup_count + max(1, round(per_s * seconds)))
    warmup, measured = Timeline(), Timeline()
    pending: list[asyncio.Task[None]] = []
    start = time.monotonic()
    for index, completion in enumerate(batch):
        delay = start + index / per_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        timeline = warmup if index < warmup_count else measured
        timeline.sent_at[completion.sample_id] = time.monotonic()
        pending.append(asyncio.create_task(producer.publish(completion)))
    await asyncio.gather(*pending)
    await wait_all(watcher, {**warmup.sent_at, **measured.sent_at}, TIMEOUT_S)
    return warmup, measured


async def half_saturation(where: Cluster, plan: Plan) -> dict[str, Any]:
    """Saturated rate of trivial programs, then latency at half of it (2 workers, cache on)."""
    kafka = await fresh_kafka(where.bootstrap, "trivial")
    async with (
        workers(kafka, 2, cache_mb=None, tag="trivial") as pids,
        RewardWatcher(kafka) as watcher,
        RolloutProducer(kafka) as producer,
    ):
        meter = CpuMeter(workers=tuple(pids), broker=where.broker_pid)
        await saturated(producer, watcher, 20)  # warm-up: page cache, cgroup slots, connections
        before = meter.snapshot()
        sat = await saturated(producer, watcher, plan.trivial_saturation)
        cpu = CpuMeter.per_item_ms(before, meter.snapshot(), plan.trivial_saturation)
        say(f"trivial programs, saturated: {sat:.1f}/s; now pacing at {sat / 2:.1f}/s")
        warmup, timeline = await paced(
            producer, watcher, sat / 2, plan.paced_seconds, PACED_WARMUP_S
        )
        # The same at a tenth of saturation: what is left when nothing waits for a core.
        _, idle = await paced(producer, watcher, sat / 10, plan.paced_seconds, PACED_WARMUP_S)
    reward_ms = timeline.reward_ms(watcher)
    ours = [watcher.rewards[k] for k in timeline.sent_at]
    idle_ms = idle.reward_ms(watcher)
    return {
        "saturated_per_s": round(sat, 2),
        "saturated_cpu_ms_per_completion": cpu,
        "paced_per_s": round(sat / 2, 2),
        "paced_seconds": plan.paced_seconds,
        "warmup_produce_to_reward_ms": percentiles(list(warmup.reward_ms(watcher).values())),
        "produce_to_reward_ms": percentiles(list(reward_ms.values())),
        "stages": stage_breakdown(ours, reward_ms),
        "verdicts": dict(Counter(str(e.verdict) for e in ours)),
        "cache_hits": sum(1 for e in ours if e.cache_hit),
        "tenth_saturation": {
            "paced_per_s": round(sat / 10, 2),
            "produce_to_reward_ms": percentiles(list(idle_ms.values())),
            "stages": stage_breakdown((watcher.rewards[k] for k in idle.sent_at), idle_ms),
        },
    }


# -- 4. makespan: a batch with long samples published last ----------------------------


def spinner(tag: str, index: int, batch: str, group: str, cpu_s: float) -> Completion:
    """A one-test stdin program that burns ``cpu_s`` of CPU before answering."""
    code = (
        f"# {tag} sample {index}\nimport time\nend = time.process_time() + {cpu_s}\n"
        "while time.process_time() < end:\n    pass\nprint(int(input()) + 1)\n"
    )
    return Completion(
        sample_id=f"{tag}-{index}",
        batch_id=batch,
        group_id=group,
        language="python",
        code=code,
        tests=IoSuite(inputs=[f"{index}\n"], outputs=[f"{index + 1}\n"]),
    )


def makespan_batches(seed: int) -> dict[str, list[Completion]]:
    """Three adversarial batches: each publishes its longest samples last.

    - one_long_last: 63 trivial samples, then one that spins 0.8 s;
    - long_group_last: 7 groups of 8 trivial samples, then a group of 8 that spin 0.2 s;
    - heavy_tail_ascending: 48 samples spinning 0-0.4 s (most short, a few long,
      drawn from a seeded Pareto), published shortest first.
    """
    rng = random.Random(seed)
    made: dict[str, list[Completion]] = {}

    def batch(name: str, lengths: list[float], group_size: int) -> None:
        tag = f"{name[:4]}{uuid.uuid4().hex[:6]}"
        made[name] = [
            spinner(tag, i, tag, f"{tag}-g{i // group_size}", s) if s else trivial(tag, i, tag)
            for i, s in enumerate(lengths)
        ]

    batch("one_long_last", [0.0] * 63 + [0.8], 8)
    batch("long_group_last", [0.0] * 56 + [0.2] * 8, 8)
    tail = sorted(min(0.4, 0.005 * rng.paretovariate(1.2)) for _ in range(48))
    batch("heavy_tail_ascending", [round(s, 3) for s in tail], 8)
    return made


async def one_makespan(
    producer: RolloutProducer,
    scored: ScoredBatches,
    watcher: RewardWatcher,
    completions: list[Completion],
    cores: int,
) -> dict[str, Any]:
    """First publish -> scored batch, against (total work / cores + the longest sample)."""
    batch_id = completions[0].batch_id
    manifest = BatchManifest(
        batch_id=batch_id,
        sample_ids=[c.sample_id for c in completions],
        group_ids=[c.group_id for c in completions],
        group_size=8,
        deadline=time.time() + TIMEOUT_S,
    )
    started = time.monotonic()
    await producer.publish_manifest(manifest)
    for completion in completions:
        await producer.publish(completion)
    await _collect_scored(scored, {batch_id})
    makespan_s = time.monotonic() - started
    await wait_all(watcher, manifest.sample_ids, TIMEOUT_S)
    exec_ms = [watcher.rewards[sid].exec_ms for sid in manifest.sample_ids]
    bound_s = (sum(exec_ms) / cores + max(exec_ms)) / 1000
    # No schedule beats this: the work spread evenly, or the longest sample alone.
    lower_s = max(sum(exec_ms) / cores, *exec_ms) / 1000
    return {
        "samples": len(completions),
        "work_s": round(sum(exec_ms) / 1000, 3),
        "longest_s": round(max(exec_ms) / 1000, 3),
        "bound_s": round(bound_s, 3),
        "makespan_s": round(makespan_s, 3),
        "ratio": round(makespan_s / bound_s, 3),
        "lower_bound_s": round(lower_s, 3),
        "over_lower_bound": round(makespan_s / lower_s, 3),
        "per_worker": dict(Counter(watcher.rewards[sid].worker_id for sid in manifest.sample_ids)),
    }


async def makespan(where: Cluster, plan: Plan) -> dict[str, Any]:
    """Each adversarial batch alone through 2 workers (1 execution each) and the aggregator."""
    kafka = await fresh_kafka(where.bootstrap, "makespan")
    cores = 2
    runs: dict[str, dict[str, Any]] = {}
    async with (
        workers(kafka, cores, cache_mb=0, tag="makespan"),
        aggregator(kafka, f"{kafka.topics.prefix}aggregator"),
        ScoredBatches(kafka, group_id=f"{kafka.topics.prefix}learner") as scored,
        RewardWatcher(kafka) as watcher,
        RolloutProducer(kafka) as producer,
    ):
        await saturated(producer, watcher, 20)  # warm-up: page cache, cgroup slots, connections
        for name, completions in makespan_batches(seed=17).items():
            runs[name] = await one_makespan(producer, scored, watcher, completions, cores)
            say(f"makespan, {name}: {runs[name]['makespan_s']} s = {runs[name]['ratio']}x bound")
    return {"cores": cores, "runs": runs, "worst_ratio": max(r["ratio"] for r in runs.values())}


# -- 3. the result cache -------------------------------------------------------------


def tagged(sample: HumanEvalSample, tag: str, copy: int) -> Completion:
    """The sample's program with a comment naming the run: distinct from every other run."""
    response = (sample.completion.response or "").replace("```python\n", f"```python\n# {tag}\n", 1)
    return msgspec.structs.replace(
        sample.completion,
        sample_id=f"{tag}-{sample.completion.sample_id}-{copy}",
        batch_id=tag,
        response=response,
    )


def cache_batches(n: int) -> tuple[list[Completion], list[Completion]]:
    """N all-distinct programs, and N where each of N/2 programs appears twice.

    The duplicated set is every other program of the distinct set (drawn from
    the same seeded shuffle), so both cost the same per program; its copies
    sit at random positions in the batch. The full run uses all 328 HumanEval
    completions (canonical and broken), so fixed costs weigh little.
    """
    pool = humaneval_samples()
    random.Random(7).shuffle(pool)
    chosen = pool[:n]
    distinct_tag, dup_tag = uuid.uuid4().hex[:8], uuid.uuid4().hex[:8]
    distinct = [tagged(s, distinct_tag, 0) for s in chosen]
    duplicated = [tagged(s, dup_tag, copy) for s in chosen[::2] for copy in (0, 1)][:n]
    random.Random(11).shuffle(duplicated)
    return distinct, duplicated


async def time_to_all_rewards(
    where: Cluster, phase: str, batch: list[Completion]
) -> dict[str, Any]:
    """Fresh topics and 2 fresh workers (cache on, empty): publish ``batch``, wait for all."""
    kafka = await fresh_kafka(where.bootstrap, phase)
    timeline = Timeline()
    async with (
        workers(kafka, 2, cache_mb=None, tag=phase) as pids,
        RewardWatcher(kafka, lazy=True) as watcher,
        RolloutProducer(kafka) as producer,
    ):
        # Untimed warm-up on programs of their own: connections, the producers'
        # idempotence handshakes and first-use code paths in the fresh workers are
        # a fixed cost that would otherwise weigh on both batches alike.
        await saturated(producer, watcher, 16)
        meter = CpuMeter(workers=tuple(pids), broker=where.broker_pid)
        before = meter.snapshot()
        await publish_timed(producer, batch, timeline)
        await wait_all(watcher, timeline.sent_at, TIMEOUT_S)
        cpu = CpuMeter.per_item_ms(before, meter.snapshot(), len(batch))
    span = timeline.span_s(watcher)
    hits = sum(1 for c in batch if watcher.rewards[c.sample_id].cache_hit)
    say(f"cache phase {phase}: {len(batch)} completions in {span:.2f} s, {hits} cache hits")
    return {
        "completions": len(batch),
        "distinct_programs": len({c.response for c in batch}),
        "time_to_all_rewards_s": round(span, 3),
        "cpu_ms_per_completion": cpu,
        "cache_hits": hits,
        "produce_to_reward_ms": percentiles(list(timeline.reward_ms(watcher).values())),
    }


async def cache(where: Cluster, plan: Plan) -> dict[str, Any]:
    """Both batches ``plan.repeats`` times each, in ABBA order; the ratio of mean times."""
    runs: dict[str, list[dict[str, Any]]] = {"all_distinct": [], "half_duplicates": []}
    order = ["all_distinct", "half_duplicates"]
    for index in range(plan.repeats):
        for key in order if index % 2 == 0 else list(reversed(order)):
            # Fresh batches (new tags) per run: no run may hit entries another left.
            distinct, duplicated = cache_batches(plan.cache_n)
            batch = distinct if key == "all_distinct" else duplicated
            runs[key].append(await time_to_all_rewards(where, f"cache-{key}", batch))
    mean = {k: statistics.fmean(r["time_to_all_rewards_s"] for r in v) for k, v in runs.items()}
    return {
        **{k: v[-1] for k, v in runs.items()},
        "mean_time_to_all_rewards_s": {k: round(v, 3) for k, v in mean.items()},
        "runs": runs,
        "ratio": ratio(mean["half_duplicates"], mean["all_distinct"]),
    }


# -- report ------------------------------------------------------------------------


def targets(result: dict[str, Any]) -> list[tuple[str, Target]]:
    """The issue's targets for the phases that ran."""
    found: list[tuple[str, Target]] = []
    if tput := result.get("throughput"):
        found += [
            ("overhead_2_workers", Target(
                "pipeline overhead, 2 workers vs executor alone at 2",
                round(100 * (1 - tput["pipeline_over_executor_2"]), 1), 15,
                at_most=True, unit=" %")),
            ("overhead_1_worker", Target(
                "pipeline overhead, 1 worker vs executor alone at 1",
                round(100 * (1 - tput["pipeline_over_executor_1"]), 1), 15,
                at_most=True, unit=" %")),
            ("scaling_2_over_1", Target(
                "throughput 2 workers / 1 worker", tput["scaling_2_over_1_workers"], 1.7,
                at_most=False, unit="x")),
        ]  # fmt: skip
    if triv := result.get("trivial"):
        p99 = triv["produce_to_reward_ms"]["p99"]
        found.append(("p99_trivial_half_saturation", Target(
            "p99 produce->reward, trivial programs at half saturation",
            p99, 30, at_most=True, strict=True, unit=" ms")))  # fmt: skip
    if span := result.get("makespan"):
        found.append(("makespan", Target(
            "batch makespan / (work / cores + longest sample), worst batch",
            span["worst_ratio"], 1.2, at_most=True, unit="x")))  # fmt: skip
    if cache_result := result.get("cache"):
        found.append(("cache_half_duplicates", Target(
            "time-to-all-rewards, 50 % duplicates / all distinct", cache_result["ratio"], 0.6,
            at_most=True, unit="x")))  # fmt: skip
    return found


def print_report(result: dict[str, Any]) -> None:
    print("rewardbus pipeline benchmark (HumanEval, 1 core per worker, result cache off)")
    if "throughput" in result:
        _print_throughput(result["throughput"])
    if triv := result.get("trivial"):
        lat, warm = triv["produce_to_reward_ms"], triv["warmup_produce_to_reward_ms"]
        print(
            f"  trivial: saturated {triv['saturated_per_s']}/s; at {triv['paced_per_s']}/s "
            f"p50 {lat['p50']} ms, p99 {lat['p99']} ms "
            f"(first second, not counted: p50 {warm['p50']} ms, p99 {warm['p99']} ms)"
        )
        for label, part in (("half", triv), ("tenth", triv["tenth_saturation"])):
            st = part["stages"]
            print(
                f"  trivial at {part['paced_per_s']}/s ({label}): "
                f"p50 {part['produce_to_reward_ms']['p50']} ms, "
                f"p99 {part['produce_to_reward_ms']['p99']} ms; p50/p99 of queue "
                f"{st['queue_ms']['p50']}/{st['queue_ms']['p99']}, exec "
                f"{st['exec_ms']['p50']}/{st['exec_ms']['p99']}, rest "
                f"{st['rest_ms']['p50']}/{st['rest_ms']['p99']} ms"
            )
    if c := result.get("cache"):
        mean = c["mean_time_to_all_rewards_s"]
        hits = [r["cache_hits"] for r in c["runs"]["half_duplicates"]]
        print(
            f"  cache: all distinct {mean['all_distinct']} s, 50 % duplicates "
            f"{mean['half_duplicates']} s (mean of {len(hits)} runs each, ABBA; "
            f"hits {hits} of {c['half_duplicates']['distinct_programs']} possible) "
            f"-> ratio {c['ratio']}"
        )
    if span := result.get("makespan"):
        for name, r in span["runs"].items():
            print(
                f"  makespan {name}: {r['makespan_s']} s for {r['work_s']} s of work "
                f"(longest {r['longest_s']} s) on {span['cores']} -> {r['ratio']}x the bound "
                f"{r['bound_s']} s ({r['over_lower_bound']}x the best any schedule could do, "
                f"{r['lower_bound_s']} s); per worker {r['per_worker']}"
            )
    print("targets:")
    for _, target in targets(result):
        print(target.line())


def _print_throughput(tput: dict[str, Any]) -> None:
    mean = tput["mean_completions_per_s"]
    for key in ("executor_1", "pipeline_1", "executor_2", "pipeline_2"):
        last = tput["runs"][key][-1]
        lat = ""
        if key.startswith("pipeline"):
            r, b = last["produce_to_reward_ms"], last["produce_to_scored_batch_ms"]
            lat = (
                f"  reward p50 {r['p50']:.0f} / p99 {r['p99']:.0f} ms,"
                f" batch p50 {b['p50']:.0f} / p99 {b['p99']:.0f} ms"
            )
        print(f"  {key:12} {mean[key]:7.2f} completions/s{lat}")
        cpu = ", ".join(f"{k} {v:g}" for k, v in last["cpu_ms_per_completion"].items())
        print(f"  {'':12} CPU ms per completion: {cpu}")
    print(
        f"  ratios: pipeline/executor 1 = {tput['pipeline_over_executor_1']}, "
        f"2 = {tput['pipeline_over_executor_2']}; "
        f"2w/1w = {tput['scaling_2_over_1_workers']} "
        f"(executor alone 2/1 = {tput['executor_scaling_2_over_1']})"
    )
    model = tput["cpu_model"]
    print(
        f"  CPU model: executor {model['executor_cpu_ms']} ms/completion; pipeline workers "
        f"{model['pipeline_worker_cpu_ms']} + broker & aggregator "
        f"{model['pipeline_broker_and_aggregator_cpu_ms']} -> pipeline/executor "
        f"{model['ratio_shared_cores']} on shared cores, {model['ratio_kafka_elsewhere']} with "
        f"Kafka elsewhere; 2w/1w {model['scaling_2_over_1_this_machine']} on this machine"
        + ("" if model["broker_measured"] else " (external broker: its CPU not counted)")
    )


async def run(args: argparse.Namespace) -> None:
    plan = Plan.make(args.quick)
    load_before = os.getloadavg()
    started = time.monotonic()
    phases = set(args.phases.split(","))
    result: dict[str, Any] = {}
    async with cluster(args.bootstrap_servers) as where:
        if "throughput" in phases:
            result["throughput"] = await throughput(where, plan)
        if "trivial" in phases:
            result["trivial"] = await half_saturation(where, plan)
        if "cache" in phases:
            result["cache"] = await cache(where, plan)
        if "makespan" in phases:
            result["makespan"] = await makespan(where, plan)
    print_report(result)
    result["targets"] = {key: t.as_json() for key, t in targets(result)}
    result["meta"] = {
        "benchmark": "bench_pipeline",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": args.quick,
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.monotonic() - started, 1),
    }
    emit_json(result)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples: a smoke run")
    parser.add_argument("--bootstrap-servers", help="use this cluster, not an embedded broker")
    parser.add_argument(
        "--phases",
        default="throughput,trivial,cache,makespan",
        help="comma-separated subset of throughput,trivial,cache,makespan (default: all)",
    )
    # Internal: the executor-alone baseline runs in a pinned child process of its own.
    parser.add_argument("--executor-alone", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quiet_logs()
    if args.executor_alone:
        asyncio.run(executor_alone_main(args.executor_alone, args.limit))
        return
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
