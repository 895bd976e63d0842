"""Every sample's trace, end to end, read back from a real Jaeger.

A trainer process publishes one batch under a step span; a sandbox worker
process and an aggregator process (the real broker between them) judge and
aggregate it, all exporting spans to the session's Jaeger. Then Jaeger's query
API must hold, for every sample, one tree across the three services:

    trainer step (trainer)
      publish completion (trainer)
        queue wait (worker)
        judge completion (worker)
          execute: parse, [compile], one span per test
          emit reward (worker)
            aggregate (aggregator)

and the aggregator's ``emit scored batch`` span must link to every sample's
``aggregate`` span. ``rewardbus trace`` is then run against the same Jaeger.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from consumers import ScoredBatches
from rewardbus.observability.jaeger import JaegerProcess
from rewardbus.observability.jaeger_query import JaegerQuery, TraceNotFound
from rewardbus.observability.otlp import SpanRecord
from rewardbus.observability.trace_view import SampleTrace, batch_trace, sample_trace
from rewardbus.runtime.local import WorkerPoolOptions, worker_pool
from rewardbus.topics import await_group_members, ensure_topics
from schemas import (
    AssertSuite,
    BatchManifest,
    Completion,
    IoSuite,
    KafkaSettings,
    ProblemRecord,
    ScoredBatch,
    suite_digest,
)
from tests.support.poll import until_sync
from tests.support.stages import stop_process

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
TRAINER, WORKER, AGGREGATOR = "rewardbus-trainer", "rewardbus-worker", "rewardbus-aggregator"

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
SUB = "a, b = map(int, input().split())\nprint(a - b)\n"
ADD_C = '#include <stdio.h>\nint main(void){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);}\n'
STDIN = IoSuite(inputs=["2 3\n", "10 -4\n", "0 0\n"], outputs=["5\n", "6\n", "0\n"])
CALL = IoSuite(inputs=[[1, 2], [5, 5]], outputs=[3, 10], fn_name="add")
ASSERTS = AssertSuite(
    code="def check(candidate):\n    assert candidate(2) == 4\n",
    entry_point="double",
    cases=["assert double(1) == 2", "assert double(3) == 6"],
)


@dataclass(frozen=True)
class Sample:
    """One completion of the run and what its trace must show."""

    completion: Completion
    verdict: str
    tests: int  # test spans expected
    compiled: bool = False


@dataclass(frozen=True)
class TracedRun:
    kafka: KafkaSettings
    batch_id: str
    samples: dict[str, Sample]
    worker_group: str
    scored: ScoredBatch
    query: JaegerQuery


def _samples(batch_id: str, problem_id: str) -> list[Sample]:
    def completion(name: str, **fields: object) -> Completion:
        return Completion(
            sample_id=f"{batch_id}-{name}",
            batch_id=batch_id,
            group_id=f"{batch_id}-g",
            policy_version=3,
            **fields,  # type: ignore[arg-type]
        )

    return [
        Sample(completion("ok", code=ADD, tests=STDIN), "accepted", 3),
        Sample(completion("dup", code=ADD, tests=STDIN), "accepted", 3),
        Sample(completion("wrong", code=SUB, tests=STDIN), "wrong_answer", 3),
        Sample(
            completion("call", code="def add(a, b):\n    return a + b\n", tests=CALL),
            "accepted",
            2,
        ),
        Sample(
            completion(
                "problem",
                code="def double(x):\n    return 2 * x\n",
                problem_id=problem_id,
                tests_digest=suite_digest(ASSERTS),
            ),
            "accepted",
            2,
        ),
        Sample(
            # Unique source per run: the worker's compile cache outlives the run.
            completion("c", language="c", code=f"/* {batch_id} */\n{ADD_C}", tests=STDIN),
            "accepted",
            3,
            compiled=True,
        ),
    ]


def _env(jaeger: JaegerProcess) -> dict[str, str]:
    return {
        **os.environ,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{jaeger.config.otlp_http_endpoint}/v1/traces",
        # Export every 100 ms instead of every 5 s: the test waits for the spans.
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


async def _trainer(kafka: KafkaSettings, env: dict[str, str], payload: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "trainer_process.py"),
        kafka.bootstrap_servers, kafka.topics.prefix, str(payload),
        env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, stderr.decode(errors="replace")


@pytest.fixture(scope="module")
async def traced_run(
    kafka_bootstrap: str, jaeger: JaegerProcess, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[TracedRun]:
    run = uuid.uuid4().hex[:10]
    from schemas import Topics

    kafka = KafkaSettings(
        bootstrap_servers=kafka_bootstrap, topics=Topics(prefix=f"tr{run}."), client_id="rb-test"
    )
    await ensure_topics(kafka, partitions=2)
    batch_id = f"tb-{run}"
    problem_id = f"p-{run}"
    samples = _samples(batch_id, problem_id)
    manifest = BatchManifest(
        batch_id=batch_id,
        sample_ids=[s.completion.sample_id for s in samples],
        group_ids=[s.completion.group_id for s in samples],
        group_size=len(samples),
        deadline=time.time() + 120,
    )
    problem = ProblemRecord(problem_id=problem_id, digest=suite_digest(ASSERTS), tests=ASSERTS)
    logs = tmp_path_factory.mktemp("traced-run")
    payload = logs / "trainer.json"
    payload.write_bytes(
        msgspec.json.encode(
            {
                "manifest": manifest,
                "completions": [s.completion for s in samples],
                "problems": [problem],
            }
        )
    )
    env = _env(jaeger)
    worker_group = f"{kafka.topics.prefix}workers"
    aggregator_group = f"{kafka.topics.prefix}aggregator"
    with pytest.MonkeyPatch.context() as patch:
        for key in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_BSP_SCHEDULE_DELAY"):
            patch.setenv(key, env[key])  # the worker pool's processes inherit them
        pool = WorkerPoolOptions(
            workers=1, group_id=worker_group, log_dir=logs, worker_id_prefix="tw"
        )
        async with worker_pool(kafka, pool):
            with (logs / "aggregator.log").open("wb") as aggregator_log:
                aggregator = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "rewardbus", "aggregator",
                    "--bootstrap-servers", kafka.bootstrap_servers,
                    "--topic-prefix", kafka.topics.prefix,
                    "--group-id", aggregator_group,
                    env=env, stderr=aggregator_log,
                )  # fmt: skip
            try:
                await await_group_members(kafka, aggregator_group, 1)
                async with ScoredBatches(kafka, group_id=f"{kafka.topics.prefix}learner") as out:
                    await _trainer(kafka, env, payload)
                    scored = await asyncio.wait_for(anext(aiter(out)), timeout=120)
            finally:
                await stop_process(aggregator)
    # Every process has flushed its spans on the way out; Jaeger batches for ~200 ms.
    yield TracedRun(
        kafka,
        batch_id,
        {s.completion.sample_id: s for s in samples},
        worker_group,
        scored,
        JaegerQuery(jaeger.config.query_url),
    )


def _complete(query: JaegerQuery, sample_id: str) -> SampleTrace | None:
    try:
        found = sample_trace(query, sample_id, lookback_s=3600)
    except TraceNotFound:
        return None
    names = {span.name for span in found.spans}
    return found if {"publish completion", "aggregate"} <= names else None


def _one(spans: list[SpanRecord], name: str) -> SpanRecord:
    matching = [span for span in spans if span.name == name]
    assert len(matching) == 1, f"{len(matching)} {name!r} spans: {[s.name for s in spans]}"
    return matching[0]


@pytest.fixture(scope="module")
def sample_traces(traced_run: TracedRun) -> dict[str, SampleTrace]:
    found: dict[str, SampleTrace] = {}

    def all_there() -> bool:
        for sample_id in traced_run.samples:
            if sample_id not in found and (trace := _complete(traced_run.query, sample_id)):
                found[sample_id] = trace
        return len(found) == len(traced_run.samples)

    until_sync(all_there, "every sample's spans in Jaeger", timeout_s=30, every_s=0.2)
    return found


def test_the_batch_was_scored(traced_run: TracedRun) -> None:
    scored = traced_run.scored
    assert scored.batch_id == traced_run.batch_id
    assert scored.complete
    verdicts = {s.sample_id: str(s.verdict) for s in scored.samples}
    assert verdicts == {sid: s.verdict for sid, s in traced_run.samples.items()}


def test_each_sample_is_one_tree_across_three_services(
    traced_run: TracedRun, sample_traces: dict[str, SampleTrace]
) -> None:
    for sample_id, found in sample_traces.items():
        spans = list(found.spans)
        assert len(found.trace_ids) == 1, sample_id
        assert [(s.name, s.service) for s in found.context] == [("trainer step", TRAINER)]
        publish = _one(spans, "publish completion")
        queue = _one(spans, "queue wait")
        judge = _one(spans, "judge completion")
        emit = _one(spans, "emit reward")
        aggregate = _one(spans, "aggregate")
        assert publish.parent_id == found.context[0].span_id
        assert queue.parent_id == publish.span_id
        assert judge.parent_id == publish.span_id
        assert emit.parent_id == judge.span_id
        assert aggregate.parent_id == emit.span_id
        assert (publish.service, queue.service, judge.service, emit.service) == (
            TRAINER, WORKER, WORKER, WORKER,
        )  # fmt: skip
        assert aggregate.service == AGGREGATOR
        assert (publish.kind, judge.kind, emit.kind, aggregate.kind) == (
            "producer", "consumer", "producer", "consumer",
        )  # fmt: skip
        # The queue wait ends where judging starts (one clock: this host).
        assert queue.end_ns <= judge.start_ns + 1_000_000
        assert queue.start_ns >= publish.start_ns - 5_000_000
        assert not any(span.failed for span in spans if span.name != "test"), sample_id


def test_messaging_attributes(traced_run: TracedRun, sample_traces: dict[str, SampleTrace]) -> None:
    topics = traced_run.kafka.topics
    for found in sample_traces.values():
        spans = list(found.spans)
        publish = _one(spans, "publish completion").attributes
        judge = _one(spans, "judge completion").attributes
        emit = _one(spans, "emit reward").attributes
        aggregate = _one(spans, "aggregate").attributes
        for attributes in (publish, judge, emit, aggregate):
            assert attributes["messaging.system"] == "kafka"
        assert publish["messaging.destination.name"] == topics.completions
        assert publish["messaging.operation.type"] == "send"
        assert judge["messaging.destination.name"] == topics.completions
        assert (
            judge["messaging.destination.partition.id"]
            == publish["messaging.destination.partition.id"]
        )
        assert judge["messaging.kafka.offset"] == publish["messaging.kafka.offset"]
        assert judge["messaging.consumer.group.name"] == traced_run.worker_group
        assert judge["messaging.operation.type"] == "process"
        assert emit["messaging.destination.name"] == topics.rewards
        assert isinstance(emit["messaging.kafka.offset"], int)
        assert aggregate["messaging.destination.name"] == topics.rewards
        assert aggregate["messaging.kafka.offset"] == emit["messaging.kafka.offset"]
        assert aggregate["messaging.consumer.group.name"] == f"{topics.prefix}aggregator"


def test_judging_attributes(traced_run: TracedRun, sample_traces: dict[str, SampleTrace]) -> None:
    hits = {}
    for sample_id, found in sample_traces.items():
        expected = traced_run.samples[sample_id]
        spans = list(found.spans)
        judge = _one(spans, "judge completion").attributes
        aggregate = _one(spans, "aggregate").attributes
        assert judge["rewardbus.sample_id"] == sample_id
        assert judge["rewardbus.batch_id"] == traced_run.batch_id
        assert judge["rewardbus.verdict"] == expected.verdict
        assert judge["rewardbus.language"] == expected.completion.language
        assert judge["rewardbus.policy_version"] == 3
        assert judge["rewardbus.worker_id"] == "tw-0"
        assert isinstance(judge["rewardbus.score"], float)
        hits[sample_id] = judge["rewardbus.cache_hit"]
        assert aggregate["rewardbus.verdict"] == expected.verdict
        assert aggregate["rewardbus.outcome"] == "accepted"
        if expected.completion.problem_id:
            assert judge["rewardbus.problem_id"] == expected.completion.problem_id
        else:
            assert "rewardbus.problem_id" not in judge
    batch = traced_run.batch_id
    # The two identical programs: one ran, the other was answered from the cache.
    assert {hits[f"{batch}-ok"], hits[f"{batch}-dup"]} == {True, False}
    assert not any(hit for sid, hit in hits.items() if sid not in (f"{batch}-ok", f"{batch}-dup"))


def test_one_span_per_test(traced_run: TracedRun, sample_traces: dict[str, SampleTrace]) -> None:
    for sample_id, found in sample_traces.items():
        expected = traced_run.samples[sample_id]
        spans = list(found.spans)
        judge = _one(spans, "judge completion")
        if judge.attributes["rewardbus.cache_hit"]:
            assert not [s for s in spans if s.name in ("execute", "test")]  # nothing ran
            continue
        execute = _one(spans, "execute")
        assert execute.parent_id == judge.span_id
        parse = _one(spans, "parse")
        assert parse.parent_id == execute.span_id
        compiled = [s for s in spans if s.name == "compile"]
        assert len(compiled) == (1 if expected.compiled else 0), sample_id
        tests = sorted((s for s in spans if s.name == "test"), key=lambda s: s.start_ns)
        assert [s.attributes["rewardbus.test.index"] for s in tests] == list(range(expected.tests))
        under = {s.span_id for s in spans if s.name in ("execute", "tests")}
        assert all(s.parent_id in under for s in tests)
        for test in tests:
            assert test.service == WORKER
            assert execute.start_ns <= test.start_ns <= test.end_ns <= execute.end_ns + 1_000_000
        if expected.verdict == "accepted":
            assert all(s.attributes["rewardbus.verdict"] == "accepted" for s in tests)
            assert not any(s.failed for s in tests)


def test_failures_are_span_status(
    traced_run: TracedRun, sample_traces: dict[str, SampleTrace]
) -> None:
    found = sample_traces[f"{traced_run.batch_id}-wrong"]
    tests = [s for s in found.spans if s.name == "test"]
    # SUB passes only "0 0" (0 - 0 == 0 + 0): two failing tests, each an error span.
    failed = sorted(s.attributes["rewardbus.test.index"] for s in tests if s.failed)
    assert failed == [0, 1]
    assert all("wrong_answer" in s.status_message for s in tests if s.failed)


def test_batch_span_links_every_sample(
    traced_run: TracedRun, sample_traces: dict[str, SampleTrace]
) -> None:
    def found() -> bool:
        try:
            batch_trace(traced_run.query, traced_run.batch_id, lookback_s=3600)
        except TraceNotFound:
            return False
        return True

    until_sync(found, "the scored batch's span in Jaeger", timeout_s=30, every_s=0.2)
    batch = batch_trace(traced_run.query, traced_run.batch_id, lookback_s=3600)
    emit = _one(list(batch.spans), "emit scored batch")
    assert emit.service == AGGREGATOR
    assert emit.parent_id == ""  # a trace of its own: it belongs to no one sample
    assert emit.attributes["rewardbus.batch.size"] == len(traced_run.samples)
    assert emit.attributes["rewardbus.batch.complete"] is True
    assert emit.attributes["messaging.destination.name"] == traced_run.kafka.topics.scored
    aggregates = {
        (found.trace_ids[0], _one(list(found.spans), "aggregate").span_id)
        for found in sample_traces.values()
    }
    assert {(link.trace_id, link.span_id) for link in emit.links} == aggregates
    assert {s.sample_id for s in batch.samples} == set(traced_run.samples)


def _rewardbus_trace(query: JaegerQuery, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rewardbus", "trace", *args, "--jaeger-url", query.base_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_rewardbus_trace_prints_the_waterfall(
    traced_run: TracedRun, sample_traces: dict[str, SampleTrace]
) -> None:
    sample_id = f"{traced_run.batch_id}-c"
    done = _rewardbus_trace(traced_run.query, sample_id)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"sample {sample_id}  trace {sample_traces[sample_id].trace_ids[0]}")
    assert lines[1] == f"within: trainer step ({TRAINER})"
    assert "\x1b" not in done.stdout  # a pipe gets plain text
    body = [line for line in lines if "│" in line][1:]  # the table's rows, after its header
    names = [line.split("│")[2].strip() for line in body]
    assert names[:3] == ["publish completion", "queue wait", "judge completion"]
    assert names.count("test") == 3
    assert {"execute", "parse", "compile", "emit reward", "aggregate"} <= set(names)
    assert sum("◀ slowest" in line for line in body) == 1
    assert lines[-1].startswith("slowest: ")
    print(done.stdout)  # the screen, for the record (pytest -s)


def test_rewardbus_trace_json_is_the_span_tree(
    traced_run: TracedRun, sample_traces: dict[str, SampleTrace]
) -> None:
    sample_id = f"{traced_run.batch_id}-ok"
    done = _rewardbus_trace(traced_run.query, sample_id, "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["sample_id"] == sample_id
    (root,) = document["spans"]
    assert root["name"] == "publish completion"
    assert [c["name"] for c in root["children"]] == ["queue wait", "judge completion"]
    judge = root["children"][1]
    assert judge["attributes"]["rewardbus.sample_id"] == sample_id
    assert "emit reward" in [c["name"] for c in judge["children"]]


def test_rewardbus_trace_batch(traced_run: TracedRun) -> None:
    done = _rewardbus_trace(traced_run.query, "--batch", traced_run.batch_id, "--wait", "30")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"batch {traced_run.batch_id}: {len(traced_run.samples)} linked")
    for sample_id in traced_run.samples:
        # One row per sample, naming the worker that judged it; no infrastructure errors.
        (row,) = [line for line in lines if f" {sample_id} " in line and "│" in line]
        cells = [cell.strip() for cell in row.split("│")]
        assert cells[2:4] == [sample_id, "tw-0"]  # span (the sample) and service (its worker)
        assert "ERROR" not in row
    assert any("emit scored batch" in line for line in lines)


def test_rewardbus_trace_unknown_sample(traced_run: TracedRun) -> None:
    done = _rewardbus_trace(traced_run.query, "no-such-sample", "--wait", "0")
    assert done.returncode == 1
    assert "no spans of sample no-such-sample" in done.stderr
