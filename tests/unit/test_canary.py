"""Judge canaries without a broker: the golden set's shape, the comparison, the counters,
and the canary batch id space kept out of learner batches (assembler, producer)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from consumers import BatchAssembler, ManifestOutcome, RewardOutcome
from kafkaio import FakeBroker
from producers import RolloutProducer
from rewardbus.canary import (
    Canary,
    CanaryKind,
    CanaryMetrics,
    CanaryOutcome,
    CanaryStats,
    GoldenSetError,
    compare,
    load_golden,
    parse_golden,
    parse_rate,
)
from schemas import (
    BatchManifest,
    Completion,
    IoSuite,
    KafkaSettings,
    RewardEvent,
    Topics,
    Verdict,
    decode,
    is_canary_batch,
)
from tests.support.metrics import counter_points

SUITE = IoSuite(inputs=["1\n"], outputs=["1\n"])


def canary(expect: Verdict = Verdict.ACCEPTED, score: float | None = 1.0) -> Canary:
    return Canary(
        name="echo",
        language="python",
        kind=CanaryKind.CORRECT,
        expect=expect,
        code="print(input())",
        tests=SUITE,
        score=score,
    )


def reward(verdict: Verdict, score: float, worker: str = "w1", batch: str = "b") -> RewardEvent:
    return RewardEvent(
        sample_id="s", batch_id=batch, verdict=verdict, score=score, worker_id=worker
    )


# -- the shipped golden set --------------------------------------------------------------


def test_the_golden_set_covers_every_kind_in_six_languages() -> None:
    canaries = load_golden()
    kinds: dict[str, set[CanaryKind]] = {}
    for one in canaries:
        kinds.setdefault(one.language, set()).add(one.kind)
    assert {"python", "cpp", "java", "go", "rust", "javascript"} <= set(kinds)
    assert all(found == set(CanaryKind) for found in kinds.values()), kinds
    assert len({c.full_name for c in canaries}) == len(canaries)
    # Every canary names its score too: scoring drift is drift.
    assert all(c.score is not None for c in canaries)
    # Wrong programs that pass part of the suite check fractional scoring.
    assert any(c.expect is Verdict.WRONG_ANSWER and c.score == 0.5 for c in canaries)


def test_a_language_subset_loads_only_its_files() -> None:
    assert {c.language for c in load_golden(languages=["python", "rust"])} == {"python", "rust"}


GOOD = """
language = "python"
[suites.one]
kind = "io"
inputs = ["1\\n"]
outputs = ["1\\n"]
[[canary]]
name = "echo"
kind = "correct"
expect = "accepted"
score = 1
suite = "one"
code = "print(input())"
[canary.limits]
time_s = 2.0
"""


def test_a_golden_file_parses_into_canaries() -> None:
    (one,) = parse_golden(GOOD)
    assert (one.full_name, one.expect, one.score, one.limits.time_s) == (
        "python/echo",
        Verdict.ACCEPTED,
        1.0,
        2.0,
    )
    assert one.tests == IoSuite(inputs=["1\n"], outputs=["1\n"])


def test_file_limits_are_defaults_under_each_canary() -> None:
    defaults = 'language = "python"\n[limits]\ntime_s = 9\nmemory_mb = 64'
    text = GOOD.replace('language = "python"', defaults)
    (one,) = parse_golden(text)
    assert (one.limits.time_s, one.limits.memory_mb) == (2.0, 64)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('suite = "one"', 'suite = "two"'), "unknown suite"),
        (('expect = "accepted"', 'expect = "fine"'), "fine"),
        (("score = 1", "score = 2"), "score must be"),
        (("score = 1", "score = 1\nweight = 3"), "unknown keys"),
        (('language = "python"', ""), "no top-level language"),
        (('kind = "io"', 'kind = "nope"'), "suite one"),
    ],
)
def test_a_bad_golden_file_says_where(change: tuple[str, str], message: str) -> None:
    with pytest.raises(GoldenSetError, match=message):
        parse_golden(GOOD.replace(*change), source="x.toml")


def test_repeated_names_are_refused(tmp_path: Path) -> None:
    again = "[[canary]]" + GOOD.split("[[canary]]", 1)[1]
    (tmp_path / "python.toml").write_text(GOOD + again)
    with pytest.raises(GoldenSetError, match="repeat"):
        load_golden(tmp_path)


# -- the comparison ----------------------------------------------------------------------


def test_the_expected_verdict_and_score_match() -> None:
    assert compare(canary(), reward(Verdict.ACCEPTED, 1.0)) is None
    assert compare(canary(score=None), reward(Verdict.ACCEPTED, 0.25)) is None


def test_another_verdict_is_a_mismatch_naming_the_worker() -> None:
    mismatch = compare(canary(), reward(Verdict.TIME_LIMIT, 0.0, worker="w7"))
    assert mismatch is not None
    assert (mismatch.expected, mismatch.actual, mismatch.worker_id) == (
        Verdict.ACCEPTED,
        Verdict.TIME_LIMIT,
        "w7",
    )
    assert mismatch.reason == "verdict time_limit, expected accepted (worker w7)"


def test_the_right_verdict_with_another_score_is_a_mismatch() -> None:
    wrong = canary(Verdict.WRONG_ANSWER, 0.5)
    assert compare(wrong, reward(Verdict.WRONG_ANSWER, 0.5 + 1e-9)) is None
    mismatch = compare(wrong, reward(Verdict.WRONG_ANSWER, 0.0))
    assert mismatch is not None and mismatch.reason.startswith("score 0, expected 0.5")


def test_a_sandbox_error_is_a_mismatch() -> None:
    assert compare(canary(), reward(Verdict.SANDBOX_ERROR, 0.0)) is not None


# -- rates, stats and counters -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "per_s"),
    [("0.2/s", 0.2), ("2", 2.0), ("12/min", 0.2), ("36/h", 0.01), (".5/m", 0.5 / 60)],
)
def test_rates(text: str, per_s: float) -> None:
    assert parse_rate(text) == pytest.approx(per_s)


@pytest.mark.parametrize("text", ["0", "-1/s", "fast", "1/d", ""])
def test_bad_rates(text: str) -> None:
    with pytest.raises(ValueError, match="rate"):
        parse_rate(text)


def outcomes() -> list[CanaryOutcome]:
    good, slow = canary(), canary(Verdict.TIME_LIMIT, 0.0)
    return [
        CanaryOutcome(good, "c-1", reward(Verdict.ACCEPTED, 1.0, "w1"), None),
        CanaryOutcome(
            good,
            "c-2",
            bad := reward(Verdict.TIME_LIMIT, 0.0, "w2"),
            compare(good, bad),
        ),
        CanaryOutcome(slow, "c-3", None, error="no reward within 1 s"),
    ]


def test_stats_count_and_keep_the_failures() -> None:
    stats = CanaryStats(max_failures_kept=1)
    for outcome in outcomes():
        stats.add(outcome)
    assert (stats.matched, stats.mismatched, stats.unanswered) == (1, 1, 1)
    assert [f.sample_id for f in stats.failures] == ["c-3"]


def test_counters_carry_worker_language_and_verdicts() -> None:
    reader = InMemoryMetricReader()
    recorder = CanaryMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    for outcome in outcomes():
        recorder.record(outcome)
    points = counter_points(reader)
    assert points["rewardbus.canary.mismatches"] == Counter(
        {
            (
                ("canary", "python/echo"),
                ("expected", "accepted"),
                ("language", "python"),
                ("verdict", "time_limit"),
                ("worker_id", "w2"),
            ): 1
        }
    )
    judged = {dict(k)["worker_id"]: dict(k)["outcome"] for k in points["rewardbus.canary.judged"]}
    assert judged == {"w1": "match", "w2": "mismatch"}
    assert points["rewardbus.canary.unanswered"] == Counter(
        {(("canary", "python/echo"), ("language", "python")): 1}
    )


# -- the canary batch id space stays out of learner batches ------------------------------


def test_the_assembler_ignores_canary_rewards_and_manifests() -> None:
    assembler = BatchAssembler()
    now = time.time()
    assert is_canary_batch("canary-host-1")
    manifest = BatchManifest(batch_id="canary-host-1", sample_ids=["canary-host-1-000000"])
    assert assembler.add_manifest(manifest, now) is ManifestOutcome.CANARY
    event = RewardEvent(
        sample_id="canary-host-1-000000", batch_id="canary-host-1", verdict=Verdict.ACCEPTED
    )
    assert assembler.add_reward(event, now) is RewardOutcome.CANARY
    assert assembler.open_batches == 0
    assert assembler.drain_changes() == []
    assert assembler.due(now + 10_000) == []
    assert (assembler.counters.canary_rewards, assembler.counters.canary_manifests) == (1, 1)


def test_a_learner_batch_beside_canaries_is_emitted_without_them() -> None:
    assembler = BatchAssembler()
    now = time.time()
    assembler.add_manifest(BatchManifest(batch_id="step-1", sample_ids=["a"]), now)
    stray = RewardEvent(sample_id="a", batch_id="canary-x", verdict=Verdict.ACCEPTED, score=1.0)
    assert assembler.add_reward(stray, now) is RewardOutcome.CANARY
    own = RewardEvent(sample_id="a", batch_id="step-1", verdict=Verdict.WRONG_ANSWER)
    assert assembler.add_reward(own, now) is RewardOutcome.ACCEPTED
    (ready,) = assembler.due(now)
    assert ready.batch.batch_id == "step-1"
    assert [(s.sample_id, s.verdict) for s in ready.batch.samples] == [("a", Verdict.WRONG_ANSWER)]


async def test_the_producer_refuses_learner_batches_in_the_canary_space() -> None:
    kafka = KafkaSettings("fake:9092", topics=Topics(prefix="unit."))
    fake = FakeBroker(partitions=1)
    for topic in kafka.topics.all():
        fake.create_topic(topic)
    async with RolloutProducer(kafka, clients=fake) as out:
        with pytest.raises(ValueError, match="canary"):
            await out.publish_manifest(BatchManifest(batch_id="canary-1", sample_ids=["s"]))
        with pytest.raises(ValueError, match="canary"):
            await out.publish(Completion(sample_id="s", batch_id="canary-1", code="print(1)"))
    assert fake.records(kafka.topics.manifests) == []
    assert fake.records(kafka.topics.completions) == []


async def test_the_producer_publishes_a_canary_whose_reward_goes_to_its_reply_topic() -> None:
    """A canary names the loop's reply topic: its reward never reaches the aggregator."""
    kafka = KafkaSettings("fake:9092", topics=Topics(prefix="unit."))
    fake = FakeBroker(partitions=1)
    for topic in kafka.topics.all():
        fake.create_topic(topic)
    reply_topic = kafka.topics.reply_topic("canary-1")
    canary = Completion(
        sample_id="s", batch_id="canary-1", code="print(1)", reply_topic=reply_topic
    )
    async with RolloutProducer(kafka, clients=fake) as out:
        await out.publish(canary)
    (record,) = fake.records(kafka.topics.completions)
    assert decode(record.value, Completion) == canary
