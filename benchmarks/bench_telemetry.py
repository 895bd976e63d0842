"""What tracing and metrics cost: the pipeline with both on against both off, same run.

"on": every worker and the aggregator export their spans over OTLP to a real Jaeger
(``rewardbus.observability.jaeger``, in-memory store) and serve ``/metrics``, which a
real Prometheus scrapes every second. "off": no exporter, no endpoint (the API's
no-op spans and meters). The two configurations alternate in ABBA order on fresh topics
and fresh processes, so linear drift of a shared machine cancels out. Each run publishes
trivial one-test programs (distinct code, result cache off, so each one is executed),
which is the worst case for relative overhead because the judging is cheapest. It waits
for every reward and every scored batch.

Reported for each configuration: completions/s (the first send to the last reward), the
CPU ms per completion of the worker and aggregator processes, and, for "on", of Jaeger
and Prometheus. The exporter's CPU per completion is the difference between the worker
and aggregator CPU with telemetry on and with it off. Target: throughput with telemetry
on at most 5 % lower.

    .venv/bin/python benchmarks/bench_telemetry.py [--quick] [--count N] [--repeats R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import (
    Target,
    Timeline,
    cluster,
    emit_json,
    fresh_kafka,
    process_cpu_s,
    publish_timed,
    quiet_logs,
    rate,
    ratio,
    say,
    wait_all,
)

from consumers import ScoredBatches
from producers import RolloutProducer
from rewardbus.observability.jaeger import JaegerConfig, JaegerProcess
from rewardbus.observability.prometheus import PrometheusConfig, PrometheusProcess, query
from rewardbus.runtime.local import RewardWatcher, stop_processes
from schemas import BatchManifest, Completion, IoSuite, KafkaSettings

TIMEOUT_S = 600.0
# After the last reward, both modes idle this long before CPU is read: longer than the
# span processor's 5 s export delay, so the spans of the run are exported (and charged)
# inside the measured window. Throughput is timed to the last reward, without it.
SETTLE_S = 6.0
BATCH = 50
_READY = re.compile(rb"ready(?: \(metrics at (http://\S+/metrics)\))?")


def _completions(count: int) -> tuple[list[BatchManifest], list[Completion]]:
    tag = uuid.uuid4().hex[:8]
    completions = [
        Completion(
            sample_id=f"{tag}-{i}",
            batch_id=f"{tag}-b{i // BATCH}",
            group_id=f"{tag}-g{i // BATCH}",
            code=f"# {tag} {i}\nprint(int(input()) + 1)\n",
            tests=IoSuite(inputs=[f"{i}\n"], outputs=[f"{i + 1}\n"]),
        )
        for i in range(count)
    ]
    manifests = [
        BatchManifest(
            batch_id=f"{tag}-b{b}",
            sample_ids=[c.sample_id for c in completions[b * BATCH : (b + 1) * BATCH]],
            group_size=BATCH,
            deadline=time.time() + TIMEOUT_S,
        )
        for b in range((count + BATCH - 1) // BATCH)
    ]
    return manifests, completions


async def _service(
    argv: list[str], env: dict[str, str], log: Path
) -> tuple[asyncio.subprocess.Process, str | None]:
    """Start a worker or aggregator; its /metrics URL (None without one) from its ready line."""
    with log.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=sink, env=env
        )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
    found = _READY.search(line)
    if found is None:
        await stop_processes([proc])
        tail = await asyncio.to_thread(log.read_text, errors="replace")
        raise SystemExit(f"{argv[3]} did not start: {tail[-2000:]}")
    return proc, found.group(1).decode() if found.group(1) else None


@contextlib.asynccontextmanager
async def _services(
    kafka: KafkaSettings, workers: int, env: dict[str, str], metrics: bool, logs: Path
) -> AsyncIterator[tuple[list[int], int, list[str]]]:
    common = ["--bootstrap-servers", kafka.bootstrap_servers, "--topic-prefix", kafka.topics.prefix]
    if metrics:
        common += ["--metrics-port", "0"]
    procs: list[asyncio.subprocess.Process] = []
    urls: list[str] = []
    try:
        for index in range(workers):
            proc, url = await _service(
                [sys.executable, "-m", "rewardbus", "worker", *common,
                 "--group-id", f"{kafka.topics.prefix}workers", "--worker-id", f"bt-{index}",
                 "--result-cache-mb", "0"],
                env, logs / f"worker-{index}.log",
            )  # fmt: skip
            procs.append(proc)
            urls += [url] if url else []
        proc, url = await _service(
            [sys.executable, "-m", "rewardbus", "aggregator", *common,
             "--group-id", f"{kafka.topics.prefix}aggregator"],
            env, logs / "aggregator.log",
        )  # fmt: skip
        procs.append(proc)
        urls += [url] if url else []
        yield [p.pid for p in procs[:-1]], procs[-1].pid, urls
    finally:
        for proc in procs:
            await stop_processes([proc])


async def one_run(
    bootstrap: str, mode: str, count: int, workers: int, jaeger: JaegerProcess | None
) -> dict[str, Any]:
    """One configuration on fresh topics and processes; rates and CPU per completion."""
    on = mode == "on"
    kafka = await fresh_kafka(bootstrap, f"tel{mode}", partitions=4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if on:
        assert jaeger is not None
        env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"{jaeger.config.otlp_http_endpoint}/v1/traces"
    manifests, completions = _completions(count)
    timeline = Timeline()
    with tempfile.TemporaryDirectory(prefix=f"rewardbus-bench-tel-{mode}-") as logs:
        async with contextlib.AsyncExitStack() as stack:
            pids, aggregator_pid, urls = await stack.enter_async_context(
                _services(kafka, workers, env, on, Path(logs))
            )
            prometheus = None
            if on:
                targets = tuple(u.removeprefix("http://").removesuffix("/metrics") for u in urls)
                prometheus = PrometheusProcess(
                    PrometheusConfig(port=0, targets=targets, scrape_interval_s=1.0)
                )
                await stack.enter_async_context(prometheus)
            scored = await stack.enter_async_context(
                ScoredBatches(kafka, group_id=f"{kafka.topics.prefix}learner")
            )
            watcher = await stack.enter_async_context(RewardWatcher(kafka, lazy=True))
            measured = {"workers": pids, "aggregator": [aggregator_pid]}
            if on:
                assert jaeger is not None and prometheus is not None
                measured |= {"jaeger": [jaeger.pid or 0], "prometheus": [prometheus.pid or 0]}
            before = {k: sum(process_cpu_s(p) for p in v) for k, v in measured.items()}
            async with RolloutProducer(kafka) as producer:
                for manifest in manifests:
                    await producer.publish_manifest(manifest)
                await publish_timed(producer, completions, timeline)
            await wait_all(watcher, timeline.sent_at, TIMEOUT_S)
            await _all_scored(scored, {m.batch_id for m in manifests})
            await asyncio.sleep(SETTLE_S)
            after = {k: sum(process_cpu_s(p) for p in v) for k, v in measured.items()}
            scraped = None
            if prometheus is not None:
                scraped = await asyncio.to_thread(_scraped, prometheus, count)
    span = timeline.span_s(watcher)
    result = {
        "mode": mode,
        "completions": count,
        "elapsed_s": round(span, 3),
        "completions_per_s": round(rate(count, span), 2),
        "cpu_ms_per_completion": {
            k: round(1000 * (after[k] - before[k]) / count, 3) for k in measured
        },
    }
    if scraped is not None:
        result["prometheus_saw_completions"] = scraped
    cpu = result["cpu_ms_per_completion"]
    say(f"{mode}: {result['completions_per_s']}/s, cpu ms/completion {cpu}")
    return result


async def _all_scored(scored: ScoredBatches, batch_ids: set[str]) -> None:
    seen: set[str] = set()
    async with asyncio.timeout(TIMEOUT_S):
        async for batch in scored:
            seen.add(batch.batch_id)
            if batch_ids <= seen:
                return


def _scraped(prometheus: PrometheusProcess, count: int) -> float:
    """What Prometheus counted: proof it really scraped the run (waits for one scrape)."""
    deadline = time.monotonic() + 10
    value = 0.0
    while time.monotonic() < deadline:
        found = query(prometheus.config.url, "sum(rewardbus_worker_completions_total)")
        value = found[0].value if found else 0.0
        if value >= count:
            break
        time.sleep(0.2)
    return value


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    mean = {m: statistics.fmean(r["completions_per_s"] for r in v) for m, v in runs.items()}

    def cpu(mode: str, part: str) -> float:
        return statistics.fmean(r["cpu_ms_per_completion"].get(part, 0.0) for r in runs[mode])

    exporter = {
        part: round(cpu("on", part) - cpu("off", part), 3) for part in ("workers", "aggregator")
    }
    return {
        "mean_completions_per_s": {m: round(v, 2) for m, v in mean.items()},
        "on_over_off": ratio(mean["on"], mean["off"]),
        "throughput_drop_pct": round(100 * (1 - mean["on"] / mean["off"]), 2),
        "cpu_ms_per_completion": {
            mode: {p: round(cpu(mode, p), 3) for p in runs[mode][0]["cpu_ms_per_completion"]}
            for mode in runs
        },
        "exporter_cpu_ms_per_completion": exporter,
        "exporter_cpu_ms_per_completion_total": round(sum(exporter.values()), 3),
        "runs": runs,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    order = ["off", "on"]
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    config = JaegerConfig(otlp_grpc_port=0, otlp_http_port=0, query_port=0, query_grpc_port=0)
    async with cluster(args.bootstrap_servers) as where, JaegerProcess(config) as jaeger:
        # A warm-up run of each (first start-ups pay for imports and page cache), unreported.
        for mode in order:
            await one_run(where.bootstrap, mode, min(args.count, 50), args.workers, jaeger)
        for index in range(args.repeats):
            for mode in order if index % 2 == 0 else list(reversed(order)):
                runs[mode].append(
                    await one_run(where.bootstrap, mode, args.count, args.workers, jaeger)
                )
    return _summary(runs)


def print_report(result: dict[str, Any]) -> None:
    mean = result["mean_completions_per_s"]
    print()
    print(
        f"throughput  off {mean['off']:8.2f}/s   on {mean['on']:8.2f}/s   "
        f"on/off {result['on_over_off']:.3f} ({result['throughput_drop_pct']:+.2f} % drop)"
    )
    for mode, parts in result["cpu_ms_per_completion"].items():
        print(f"cpu ms/completion ({mode}): " + ", ".join(f"{k} {v}" for k, v in parts.items()))
    print(
        f"exporter cpu ms/completion (on - off): {result['exporter_cpu_ms_per_completion']}"
        f" = {result['exporter_cpu_ms_per_completion_total']} total"
    )
    target = Target("throughput with telemetry on / off", result["on_over_off"], 0.95, False)
    print(target.line())
    result["targets"] = {target.name: target.passed}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run (smoke test)")
    parser.add_argument("--count", type=int, default=600, help="completions per run")
    parser.add_argument("--repeats", type=int, default=4, help="runs per configuration")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--bootstrap-servers", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.count, args.repeats = 60, 1
    quiet_logs()
    result = asyncio.run(run(args))
    print_report(result)
    emit_json(result)


if __name__ == "__main__":
    main()
