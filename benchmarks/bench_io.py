"""Big stdin/stdout test suites: inline in every completion vs once on the problems topic.

A CodeContests-shaped problem — read n integers, print their sum and the sorted
array — with 60 deterministic tests, ~3 MB of test data in total (expected
outputs computed here in Python). A correct C++ and a correct Python solution,
N completions of each, through the pipeline (2 worker processes, one core
each, result cache off so every completion really executes):

(a) the suite inline in every Completion;
(b) the suite published once as a ProblemRecord on the compacted problems
    topic; completions carry ``problem_id`` + ``tests_digest``.

Reported per variant: bytes published, completions/s, p50/p99 produce→reward;
then the ratios (b)/(a). Before that, what Kafka's default 1 MB message limit
does to a suite of this size (the finding that decides which variant is even
possible), and how far the limits were raised to run the comparison at all.
Variants run in ABBA order (a, b, b, a) so load drift on a shared machine
cancels; means are reported. One JSON object on the last line.

    .venv/bin/python benchmarks/bench_io.py [--quick] [--bootstrap-servers HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

import cramjam  # what aiokafka compresses lz4 with: an estimate of the bytes on the wire
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import (
    Cluster,
    CpuMeter,
    Timeline,
    cluster,
    emit_json,
    fresh_kafka,
    percentiles,
    publish_timed,
    quiet_logs,
    rate,
    ratio,
    say,
    wait_all,
    workers,
)

from producers import ProducerConfig, ProducerError, RolloutProducer
from rewardbus.runtime.local import RewardWatcher
from schemas import (
    MAX_RECORD_BYTES,
    Completion,
    IoSuite,
    KafkaSettings,
    Limits,
    ProblemRecord,
    encode,
    suite_digest,
)

TIMEOUT_S = 300.0
RAISED_LIMIT = MAX_RECORD_BYTES  # producer max_request_size and topic max.message.bytes
KAFKA_DEFAULT_LIMIT = 1 << 20  # aiokafka's max_request_size default
TOPIC_DEFAULT_LIMIT = 1_048_588  # Kafka's max.message.bytes default

CPP = """\
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n;
    std::cin >> n;
    std::vector<long long> a(n);
    long long sum = 0;
    for (auto& x : a) {
        std::cin >> x;
        sum += x;
    }
    std::sort(a.begin(), a.end());
    std::string out = std::to_string(sum) + "\\n";
    for (int i = 0; i < n; ++i) {
        if (i) out += ' ';
        out += std::to_string(a[i]);
    }
    out += '\\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
}
"""

PYTHON = """\
import sys

data = sys.stdin.buffer.read().split()
n = int(data[0])
a = sorted(map(int, data[1 : 1 + n]))
sys.stdout.write(f"{sum(a)}\\n{' '.join(map(str, a))}\\n")
"""


@dataclass(frozen=True)
class Plan:
    """Sizes; ``--quick`` runs fewer completions and one pass, same suite."""

    per_language: int
    passes: int  # 1: a, b; 2: a, b, b, a
    tests: int = 60
    mean_numbers: int = 2300  # per test: ~25 KB in, ~25 KB out

    @staticmethod
    def make(quick: bool) -> Plan:
        return Plan(per_language=3, passes=1) if quick else Plan(per_language=20, passes=2)


# -- the problem ------------------------------------------------------------------


def sum_sort_suite(plan: Plan) -> IoSuite:
    """Deterministic tests: n integers in, their sum and the sorted list out."""
    rng = random.Random(2024)
    inputs, outputs = [], []
    for index in range(plan.tests):
        # Sizes vary (edge cases first), as contest suites do; the mean is what sizes the data.
        n = (
            [1, 2, 3][index]
            if index < 3
            else rng.randint(plan.mean_numbers // 2, plan.mean_numbers * 3 // 2)
        )
        numbers = [rng.randint(-(10**9), 10**9) for _ in range(n)]
        inputs.append(f"{n}\n{' '.join(map(str, numbers))}\n")
        outputs.append(f"{sum(numbers)}\n{' '.join(map(str, sorted(numbers)))}\n")
    return IoSuite(inputs=inputs, outputs=outputs, compare="tokens")


def completions(
    plan: Plan, tag: str, *, inline: IoSuite | None, problem: str | None, digest: str | None
) -> list[Completion]:
    """N C++ and N Python completions, interleaved, each with the suite inline or by reference."""
    batch: list[Completion] = []
    for index in range(plan.per_language):
        for language, code in (("cpp", CPP), ("python", PYTHON)):
            batch.append(
                Completion(
                    sample_id=f"{tag}-{language}-{index}",
                    batch_id=f"{tag}-{index // 8}",
                    group_id=f"{tag}-sum-sort",
                    language=language,
                    code=code,
                    tests=inline,
                    problem_id=problem,
                    tests_digest=digest,
                    limits=Limits(time_s=5.0, total_time_s=120.0),
                )
            )
    return batch


def wire_bytes(payloads: Sequence[bytes]) -> dict[str, int]:
    """Encoded payload bytes, and the same lz4-compressed (about what the log stores)."""
    return {
        "payload_bytes": sum(len(p) for p in payloads),
        "lz4_bytes_estimate": sum(len(bytes(cramjam.lz4.compress(p))) for p in payloads),
        "messages": len(payloads),
    }


# -- finding: Kafka's default message size limit ---------------------------------------


async def try_publish(
    kafka: KafkaSettings, what: Completion | ProblemRecord, max_request_size: int
) -> str:
    """Publish one message; "ok" or the error, briefly."""
    config = ProducerConfig(max_request_size=max_request_size)
    try:
        async with RolloutProducer(kafka, config) as producer:
            async with asyncio.timeout(60):
                if isinstance(what, ProblemRecord):
                    await producer.publish_problem(what)
                else:
                    await producer.publish(what)
    except (KafkaError, ProducerError, TimeoutError) as exc:
        cause: BaseException = exc
        while cause.__cause__ is not None:  # the client's own error, under the seam's wrappers
            cause = cause.__cause__
        return f"FAILS: {type(cause).__name__}: {str(cause)[:120]}"
    return "ok"


async def set_topic_limit(kafka: KafkaSettings, max_message_bytes: int) -> None:
    """max.message.bytes on the completions and problems topics (the broker's own limit).

    ``ensure_topics`` creates both with 16 MiB; this puts Kafka's default back
    (or raises it again). AlterConfigs replaces a topic's whole config, so the
    problems topic's compaction is restated here.
    """
    limit = {"max.message.bytes": str(max_message_bytes)}
    admin = AIOKafkaAdminClient(**kafka.client_kwargs())
    await admin.start()
    try:
        await admin.alter_configs(
            [
                ConfigResource(ConfigResourceType.TOPIC, kafka.topics.completions, configs=limit),
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    kafka.topics.problems,
                    configs={**limit, "cleanup.policy": "compact"},
                ),
            ]
        )
    finally:
        await admin.close()


async def size_limits(where: Cluster, suite: IoSuite) -> dict[str, str]:
    """What happens to a suite this big under default limits, and with each raised."""
    kafka = await fresh_kafka(where.bootstrap, "io-limits")
    digest = suite_digest(suite)
    inline = completions(Plan(1, 1), "limits", inline=suite, problem=None, digest=None)[0]
    problem = ProblemRecord(problem_id="sum-sort", digest=digest, tests=suite)
    await set_topic_limit(kafka, TOPIC_DEFAULT_LIMIT)
    found = {
        "inline_default_limits": await try_publish(kafka, inline, KAFKA_DEFAULT_LIMIT),
        "problem_default_limits": await try_publish(kafka, problem, KAFKA_DEFAULT_LIMIT),
        "inline_producer_raised_topic_default": await try_publish(kafka, inline, RAISED_LIMIT),
    }
    await set_topic_limit(kafka, RAISED_LIMIT)
    found["inline_producer_and_topic_raised"] = await try_publish(kafka, inline, RAISED_LIMIT)
    for key, value in found.items():
        say(f"  {key}: {value}")
    return found


# -- the comparison -----------------------------------------------------------------


async def warm_up(producer: RolloutProducer, watcher: RewardWatcher) -> None:
    """One small completion per language: compile (cached on disk) and page cache, untimed."""
    tiny = IoSuite(inputs=["2\n3 1\n"], outputs=["4\n1 3\n"])
    batch = [
        Completion(
            sample_id=f"warm-{lang}-{uuid.uuid4().hex[:6]}", language=lang, code=code, tests=tiny
        )
        for lang, code in (("cpp", CPP), ("python", PYTHON))
    ]
    timeline = Timeline()
    await publish_timed(producer, batch, timeline)
    await wait_all(watcher, timeline.sent_at, TIMEOUT_S)


async def variant(where: Cluster, plan: Plan, suite: IoSuite, *, shared: bool) -> dict[str, Any]:
    """One variant on fresh topics with fresh workers (2, cache off)."""
    name = "problems" if shared else "inline"
    kafka = await fresh_kafka(where.bootstrap, f"io-{name}")
    tag = uuid.uuid4().hex[:8]
    digest = suite_digest(suite)
    record = ProblemRecord(problem_id=f"sum-sort-{tag}", digest=digest, tests=suite)
    batch = completions(
        plan,
        tag,
        inline=None if shared else suite,
        problem=record.problem_id if shared else None,
        digest=digest if shared else None,
    )
    payloads = [encode(c) for c in batch] + ([encode(record)] if shared else [])
    timeline = Timeline()
    async with (
        workers(kafka, 2, cache_mb=0, tag=f"io-{name}") as pids,
        RewardWatcher(kafka) as watcher,
        RolloutProducer(kafka) as producer,  # ProducerConfig: 16 MiB requests by default
    ):
        await warm_up(producer, watcher)
        meter = CpuMeter(workers=tuple(pids), broker=where.broker_pid)
        before = meter.snapshot()
        started = time.monotonic()
        if shared:  # once per dataset, as a trainer would at start-up: inside the timing
            await producer.publish_problem(record)
        await publish_timed(producer, batch, timeline)
        await wait_all(watcher, timeline.sent_at, TIMEOUT_S)
        elapsed = time.monotonic() - started
        cpu = CpuMeter.per_item_ms(before, meter.snapshot(), len(batch))
    events = [watcher.rewards[c.sample_id] for c in batch]
    result: dict[str, Any] = {
        "variant": name,
        "completions": len(batch),
        **wire_bytes(payloads),
        "elapsed_s": round(elapsed, 3),
        "completions_per_s": round(rate(len(batch), elapsed), 2),
        "produce_to_reward_ms": percentiles(list(timeline.reward_ms(watcher).values())),
        "queue_ms": percentiles([e.queue_ms for e in events]),
        "exec_ms_by_language": {
            lang: percentiles(
                [e.exec_ms for c, e in zip(batch, events, strict=True) if c.language == lang]
            )
            for lang in ("cpp", "python")
        },
        "verdicts": dict(
            Counter(f"{c.language}:{e.verdict}" for c, e in zip(batch, events, strict=True))
        ),
        "cpu_ms_per_completion": cpu,
    }
    say(
        f"{name}: {result['completions_per_s']}/s, {result['payload_bytes'] / 1e6:.1f} MB published"
    )
    return result


async def compare(where: Cluster, plan: Plan, suite: IoSuite) -> dict[str, Any]:
    order = [False, True] if plan.passes == 1 else [False, True, True, False]
    runs: dict[str, list[dict[str, Any]]] = {"inline": [], "problems": []}
    for shared in order:
        result = await variant(where, plan, suite, shared=shared)
        runs[result["variant"]].append(result)

    def mean(name: str, key: str) -> float:
        return statistics.fmean(float(r[key]) for r in runs[name])

    def mean_pct(name: str, q: str) -> float:
        return statistics.fmean(r["produce_to_reward_ms"][q] for r in runs[name])

    summary = {
        name: {
            "payload_bytes": int(mean(name, "payload_bytes")),
            "lz4_bytes_estimate": int(mean(name, "lz4_bytes_estimate")),
            "completions_per_s": round(mean(name, "completions_per_s"), 2),
            "p50_ms": round(mean_pct(name, "p50"), 1),
            "p99_ms": round(mean_pct(name, "p99"), 1),
        }
        for name in runs
    }
    a, b = summary["inline"], summary["problems"]
    ratios = {
        "bytes": ratio(b["payload_bytes"], a["payload_bytes"]),
        "completions_per_s": ratio(b["completions_per_s"], a["completions_per_s"]),
        "p50": ratio(b["p50_ms"], a["p50_ms"]),
        "p99": ratio(b["p99_ms"], a["p99_ms"]),
    }
    return {"summary": summary, "ratios_problems_over_inline": ratios, "runs": runs}


def print_report(suite: IoSuite, encoded: int, limits: dict[str, str], cmp: dict[str, Any]) -> None:
    data = sum(len(s) for s in suite.inputs) + sum(len(s) for s in suite.outputs)
    print("rewardbus I/O benchmark: a 60-test stdin/stdout suite, inline vs the problems topic")
    print(
        f"  suite: {len(suite.inputs)} tests, {data / 1e6:.2f} MB of test data, "
        f"{encoded / 1e6:.2f} MB encoded (Kafka's default message limit is 1 MiB)"
    )
    for key, value in limits.items():
        print(f"  {key:40} {value}")
    columns = ("MB published", "lz4 MB", "compl/s", "p50 ms", "p99 ms")
    print(f"  {'variant':10} {columns[0]:>13}" + "".join(f" {c:>8}" for c in columns[1:]))
    for name, row in cmp["summary"].items():
        print(
            f"  {name:10} {row['payload_bytes'] / 1e6:13.2f} {row['lz4_bytes_estimate'] / 1e6:8.2f}"
            f" {row['completions_per_s']:8.2f} {row['p50_ms']:8.0f} {row['p99_ms']:8.0f}"
        )
    r = cmp["ratios_problems_over_inline"]
    print(
        f"  problems/inline: bytes {r['bytes']}, completions/s {r['completions_per_s']}, "
        f"p50 {r['p50']}, p99 {r['p99']}"
    )


async def run(args: argparse.Namespace) -> None:
    plan = Plan.make(args.quick)
    suite = sum_sort_suite(plan)
    encoded = len(encode(suite))
    started = time.monotonic()
    async with cluster(args.bootstrap_servers) as where:
        say(f"suite: {len(suite.inputs)} tests, {encoded / 1e6:.2f} MB encoded; size limits:")
        limits = await size_limits(where, suite)
        cmp = await compare(where, plan, suite)
    print_report(suite, encoded, limits, cmp)
    emit_json(
        {
            "meta": {
                "benchmark": "bench_io",
                "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "quick": args.quick,
                "wall_s": round(time.monotonic() - started, 1),
                "raised_limit_bytes": RAISED_LIMIT,
            },
            "suite": {
                "tests": len(suite.inputs),
                "test_data_bytes": sum(map(len, suite.inputs)) + sum(map(len, suite.outputs)),
                "encoded_bytes": encoded,
            },
            "size_limits": limits,
            **cmp,
        }
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer completions, one pass")
    parser.add_argument("--bootstrap-servers", help="use this cluster, not an embedded broker")
    args = parser.parse_args(argv)
    quiet_logs()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
