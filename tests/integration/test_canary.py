"""Judge canaries on the real broker with real sandbox workers: the golden set judged
through the live topics, a misconfigured judge caught by worker and language, and no
canary ever in a learner's scored batch."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import kafkaio
from consumers import AggregatorConfig
from kafkaio import AioClients, ProducerOptions, TopicPartition
from producers import RolloutProducer
from rewardbus.canary import CanaryConfig, CanaryStats, load_golden, run_canaries
from rewardbus.topics import await_group_members, ensure_topics
from sandbox_workers import Executor
from schemas import (
    BatchManifest,
    Completion,
    IoSuite,
    KafkaSettings,
    RewardEvent,
    ScoredBatch,
    TestSuite,
    Verdict,
    decode,
    encode,
    is_canary_batch,
)
from tests.support.broker_state import until_committed
from tests.support.metrics import Points, counter_points
from tests.support.poll import until
from tests.support.reading import end_offsets, read_topic
from tests.support.stages import aggregator, group_of, running, worker

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class ShrunkTimeLimits:
    """A misconfigured judge: the real executor, given a fiftieth of every time limit."""

    inner: Executor
    factor: float = 0.02

    @property
    def languages(self) -> dict[str, str]:
        return self.inner.languages

    async def run(self, completion: Completion, suite: TestSuite | None = None) -> RewardEvent:
        limits = msgspec.structs.replace(
            completion.limits, time_s=completion.limits.time_s * self.factor
        )
        return await self.inner.run(msgspec.structs.replace(completion, limits=limits), suite)


async def _canaries(
    kafka: KafkaSettings,
    config: CanaryConfig,
    languages: list[str] | None = None,
    *,
    also: MetricReader | None = None,
) -> tuple[CanaryStats, Points, list[RewardEvent]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader] if also is None else [reader, also])
    events: list[RewardEvent] = []
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    stats = await run_canaries(
        kafka,
        load_golden(languages=languages),
        config,
        shutdown=stop,
        meter=provider.get_meter("test"),
        on_outcome=lambda o: events.append(o.event) if o.event is not None else None,
    )
    return stats, counter_points(reader), events


@pytest.mark.timeout(900)  # a cold compile cache builds every Go, Rust, Java and C++ canary
async def test_the_golden_set_is_judged_right_through_the_live_topics(
    kafka: KafkaSettings, span_exporter: InMemorySpanExporter
) -> None:
    await ensure_topics(kafka, partitions=4)
    golden = load_golden()
    config = CanaryConfig(rate_per_s=50, max_in_flight=8, answer_timeout_s=600, rounds=1)
    async with running(worker(kafka, "w1")), running(worker(kafka, "w2")):
        await await_group_members(kafka, group_of(kafka, "workers"), 2, timeout_s=60)
        stats, points, events = await _canaries(kafka, config)

    bad = [
        (f.canary.full_name, f.mismatch.reason if f.mismatch else f.error) for f in stats.failures
    ]
    assert bad == []
    assert (stats.sent, stats.matched) == (len(golden), len(golden))
    # Judged by the worker group (both members), never answered from the result cache.
    assert {e.worker_id for e in events} == {"w1", "w2"}
    assert not any(e.cache_hit for e in events)
    assert all(is_canary_batch(e.batch_id) for e in events)
    judged = points["rewardbus.canary.judged"]
    assert sum(judged.values()) == len(golden)
    assert {dict(k)["outcome"] for k in judged} == {"match"}
    assert {dict(k)["language"] for k in judged} == {c.language for c in golden}
    assert "rewardbus.canary.mismatches" not in points
    # Canary rewards went to the loop's reply topic: the learner's rewards topic has none.
    assert sum((await end_offsets(kafka, kafka.topics.rewards)).values()) == 0
    # Each canary's trace runs from its span through the worker that judged it.
    spans = span_exporter.get_finished_spans()
    canary_spans = [s for s in spans if s.name == "judge canary"]
    assert len(canary_spans) == len(golden)
    assert all(s.attributes and s.attributes["rewardbus.canary.match"] for s in canary_spans)
    judged_traces = {
        s.context.trace_id for s in spans if s.name == "judge completion" and s.context is not None
    }
    assert {s.context.trace_id for s in canary_spans if s.context is not None} <= judged_traces


@pytest.mark.timeout(300)
async def test_a_misconfigured_judge_is_a_mismatch_naming_its_worker_and_language(
    kafka: KafkaSettings, span_exporter: InMemorySpanExporter
) -> None:
    await ensure_topics(kafka, partitions=4)
    config = CanaryConfig(rate_per_s=50, max_in_flight=8, answer_timeout_s=120, rounds=1)
    # The counters also go to a Prometheus reader: the alert rules read those names.
    registry = CollectorRegistry(auto_describe=False)
    prometheus = PrometheusMetricReader(scope_info_enabled=False, registry=registry)
    async with running(worker(kafka, "w-broken", wrap=ShrunkTimeLimits)):
        stats, points, _events = await _canaries(
            kafka, config, languages=["python"], also=prometheus
        )
    exposed = {
        (sample.name, sample.labels["canary"], sample.labels["worker_id"]): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if sample.name == "rewardbus_canary_mismatches_total"
    }
    assert (
        exposed[("rewardbus_canary_mismatches_total", "python/sum-busy-correct", "w-broken")] == 1
    )

    assert stats.unanswered == 0
    by_name = {f.canary.name: f for f in stats.failures}
    # The canary that does real work inside its limit is timed out by the broken judge.
    busy = by_name["sum-busy-correct"]
    assert busy.mismatch is not None
    assert (busy.mismatch.expected, busy.mismatch.actual) == (Verdict.ACCEPTED, Verdict.TIME_LIMIT)
    mismatches = points["rewardbus.canary.mismatches"]
    assert (
        mismatches[
            (
                ("canary", "python/sum-busy-correct"),
                ("expected", "accepted"),
                ("language", "python"),
                ("verdict", "time_limit"),
                ("worker_id", "w-broken"),
            )
        ]
        == 1
    )
    assert sum(mismatches.values()) == stats.mismatched
    assert all(dict(k)["worker_id"] == "w-broken" for k in mismatches)
    # Programs whose verdict no time limit changes are still judged right.
    assert "sum-wrong" not in by_name and "sum-crash" not in by_name
    (span,) = [
        s
        for s in span_exporter.get_finished_spans()
        if s.name == "judge canary"
        and s.attributes
        and s.attributes["rewardbus.canary.name"] == "python/sum-busy-correct"
    ]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is not None and "w-broken" in span.status.description
    (event,) = [e for e in span.events if e.name == "canary mismatch"]
    assert event.attributes is not None
    assert dict(event.attributes) == {
        "rewardbus.worker_id": "w-broken",
        "rewardbus.language": "python",
        "rewardbus.canary.expected_verdict": "accepted",
        "rewardbus.verdict": "time_limit",
        "rewardbus.score": 0.0,
    }


async def _committed_up_to(
    kafka: KafkaSettings, group: str, ends: dict[TopicPartition, int], timeout_s: float = 60
) -> None:
    """Poll the aggregator group's committed offsets until they reach ``ends``."""
    await until_committed(
        kafka, group, ends, what="the aggregator to commit", timeout_s=timeout_s, every_s=0.2
    )


async def _scored(kafka: KafkaSettings) -> list[ScoredBatch]:
    return [decode(v, ScoredBatch) for v in await read_topic(kafka, kafka.topics.scored)]


@pytest.mark.timeout(300)
async def test_canaries_never_appear_in_a_learner_batch(kafka: KafkaSettings) -> None:
    await ensure_topics(kafka, partitions=4)
    agg_group = group_of(kafka, "agg")
    suite = IoSuite(inputs=["2 3\n"], outputs=["5\n"])
    learner = [
        Completion(
            sample_id=f"step1-s{i}",
            batch_id="step1",
            group_id="step1-g0",
            code=f"# {i}\na, b = map(int, input().split())\nprint(a + b)\n",
            tests=suite,
        )
        for i in range(4)
    ]
    manifest = BatchManifest(
        batch_id="step1",
        sample_ids=[c.sample_id for c in learner],
        group_ids=[c.group_id for c in learner],
        group_size=4,
        deadline=time.time() + 120,
    )
    # A canary reward and manifest that reach the learner's topics anyway (an old worker,
    # a misrouted reply): the aggregator must drop them, not open a batch for them.
    stray = RewardEvent(
        sample_id="canary-old-000001", batch_id="canary-old", verdict=Verdict.ACCEPTED, score=1.0
    )
    stray_manifest = BatchManifest(batch_id="canary-old", sample_ids=[stray.sample_id])
    raw = AioClients(kafka).producer(ProducerOptions())
    async with kafkaio.running(raw):
        await raw.send_and_wait(kafka.topics.rewards, encode(stray), key=b"canary-old")
        await raw.send_and_wait(kafka.topics.manifests, encode(stray_manifest), key=b"canary-old")

    flushing = AggregatorConfig(group_id=agg_group, flush_interval_s=0.2)
    config = CanaryConfig(rate_per_s=50, max_in_flight=8, answer_timeout_s=120, rounds=2)
    async with running(aggregator(kafka, flushing)), running(worker(kafka, "w1")):
        async with RolloutProducer(kafka) as producer:
            canaries = asyncio.ensure_future(_canaries(kafka, config, languages=["python"]))
            await producer.publish_many(learner)
            await producer.publish_manifest(manifest)
            stats, _points, events = await canaries
        ends = {
            **await end_offsets(kafka, kafka.topics.rewards),
            **await end_offsets(kafka, kafka.topics.manifests),
        }
        await _committed_up_to(kafka, agg_group, ends)
        batches = await _scored(kafka)

    assert stats.failures == []
    # The second round ran again: canaries are never answered from the result cache.
    assert len(events) == 2 * len(load_golden(languages=["python"]))
    assert not any(e.cache_hit for e in events)
    assert [b.batch_id for b in batches] == ["step1"]
    (batch,) = batches
    assert batch.complete and [s.sample_id for s in batch.samples] == manifest.sample_ids
    canary_ids = {e.sample_id for e in events} | {stray.sample_id}
    assert not canary_ids & {s.sample_id for s in batch.samples}


async def _rewardbus(*args: str, timeout_s: float = 240) -> tuple[int, str, str]:
    """The CLI as a subprocess, without blocking the loop the in-process worker runs on."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rewardbus",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_s)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


WRONG_EXPECTATION = """
language = "javascript"

[[canary]]
name = "echo-expected-wrongly"
kind = "correct"
expect = "wrong_answer"
score = 0.0
code = "console.log(require('fs').readFileSync(0, 'utf8').trim());"
[canary.tests]
kind = "io"
inputs = ["7\\n"]
outputs = ["7\\n"]
"""


@pytest.mark.timeout(300)
async def test_the_command_exits_zero_when_every_canary_matches_and_one_otherwise(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    await ensure_topics(kafka, partitions=4)
    where = ["--bootstrap-servers", kafka.bootstrap_servers, "--topic-prefix", kafka.topics.prefix]
    (tmp_path / "javascript.toml").write_text(WRONG_EXPECTATION)
    async with running(worker(kafka, "w-cli")):
        good = await _rewardbus(
            "canary", "--once", "--languages", "javascript", "--rate", "20/s", *where
        )
        wrong = await _rewardbus("canary", "--once", "--golden", str(tmp_path), *where)

    status, out, err = good
    assert status == 0, err[-3000:]
    assert "Unclosed" not in good[2] + wrong[2]  # every Kafka client stopped before exit
    lines = out.strip().splitlines()
    count = len(load_golden(languages=["javascript"]))
    assert lines[-1] == f"canaries sent {count}: {count} matched, 0 mismatched, 0 unanswered"
    assert sum(line.startswith("ok ") and "(worker w-cli)" in line for line in lines) == count
    status, out, err = wrong
    assert status == 1, err[-3000:]
    assert (
        "MISMATCH   javascript/echo-expected-wrongly: verdict accepted, expected wrong_answer"
        " (worker w-cli)"
    ) in out
    assert "canaries sent 1: 0 matched, 1 mismatched, 0 unanswered" in out


def _judged_on(url: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "rewardbus_canary_judged_total"
    )


async def _metrics_url(stderr: asyncio.StreamReader) -> str:
    """The URL the command announces on stderr (among its log lines)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = (await asyncio.wait_for(stderr.readline(), timeout=60)).decode()
        assert line, "the command ended before announcing its metrics"
        if line.startswith("rewardbus canary: metrics at "):
            return line.removeprefix("rewardbus canary: metrics at ").strip()
    raise AssertionError("no metrics URL announced")


@pytest.mark.timeout(300)
async def test_the_command_runs_until_sigterm_and_serves_its_counters(
    kafka: KafkaSettings,
) -> None:
    await ensure_topics(kafka, partitions=4)
    async with running(worker(kafka, "w-live")):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rewardbus", "canary", "--rate", "5/s",
            "--languages", "javascript", "--metrics-port", "0",
            "--bootstrap-servers", kafka.bootstrap_servers, "--topic-prefix", kafka.topics.prefix,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None
        try:
            url = await _metrics_url(proc.stderr)
            # More than one pass over the set: the loop keeps going round.
            wanted = len(load_golden(languages=["javascript"])) + 2

            async def judged_enough() -> bool:
                return await asyncio.to_thread(_judged_on, url) >= wanted

            await until(judged_enough, f"{wanted} canaries judged", timeout_s=120, every_s=0.5)
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()[-3000:]
    summary = out.decode().strip().splitlines()[-1]
    assert summary.startswith("canaries sent ") and " 0 mismatched, 0 unanswered" in summary
