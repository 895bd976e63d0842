"""Poison on the real broker: every bad shape ends in the DLQ with its reason, and nothing pins.

One partition, so "the pipeline keeps going" means what it says: the good completions
published after the poison sit behind it on the same partition, and are scored.
(test_pipeline.py covers garbage bytes, foreign reply topics, a reward the topic
refuses and a digest mismatch on its own; here they come all in one stream.)
"""

from __future__ import annotations

import msgpack
import pytest

import kafkaio
from kafkaio import AioClients, ProducerOptions
from producers import PublishError, RolloutProducer
from rewardbus.topics import ensure_topics
from schemas import (
    Completion,
    DeadLetter,
    IoSuite,
    KafkaSettings,
    Limits,
    ProblemRecord,
    RewardEvent,
    Verdict,
    decode,
    encode,
    suite_digest,
)
from tests.support.reading import read_at_least
from tests.support.stages import running, worker

pytestmark = pytest.mark.integration

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
SUITE = IoSuite(inputs=["2 3\n"], outputs=["5\n"])
MB = 1_000_000


def _good(sample_id: str) -> Completion:
    return Completion(sample_id=sample_id, batch_id="b", code=f"# {sample_id}\n{ADD}", tests=SUITE)


def _nested(depth: int) -> bytes:
    """A Completion whose one io input is a list nested ``depth`` deep (msgpack by hand)."""
    suite: bytes = b"\x83" + b"".join(msgpack.packb(k) for k in ("kind", "io", "inputs"))
    suite += b"\x91" + b"\x91" * depth + b"\x01" + msgpack.packb("outputs") + msgpack.packb([1])
    head: bytes = msgpack.packb("sample_id") + msgpack.packb("nested") + msgpack.packb("tests")
    return b"\x82" + head + suite


# key -> (raw record value, stage, a fragment of the reason)
_RAW_POISON: dict[bytes, tuple[bytes, str, str]] = {
    b"wrong-types": (
        msgpack.packb({"sample_id": 42, "code": ["not", "text"], "tests": SUITE.inputs}),
        "decode",
        "Expected `str`",
    ),
    b"suite-is-a-string": (
        msgpack.packb({"sample_id": "s", "code": ADD, "tests": "assert add(2, 3) == 5"}),
        "decode",
        "Completion",
    ),
    b"nested": (_nested(100_000), "decode", "nested too deeply"),
}


def _poison_completions(problem: ProblemRecord) -> dict[str, tuple[Completion, str, str]]:
    """sample id -> (completion, stage, a fragment of the reason)."""
    fence = "```python\n" + "x = 1\n" * (15 * MB // 6) + "```\n"
    return {
        "cobol": (
            Completion(sample_id="cobol", language="cobol", code="DISPLAY 'HI'.", tests=SUITE),
            "execute",
            "unsupported language 'cobol'",
        ),
        "lopsided": (
            Completion(
                sample_id="lopsided", code=ADD, tests=IoSuite(inputs=["1 1\n", "2 2\n"], outputs=[])
            ),
            "execute",
            "2 inputs but 0 outputs",
        ),
        "empty-suite": (
            Completion(sample_id="empty-suite", code=ADD, tests=IoSuite(inputs=[], outputs=[])),
            "execute",
            "empty",
        ),
        "fifteen-mb": (
            Completion(sample_id="fifteen-mb", response=fence, tests=SUITE),
            "validate",
            "response is 15,000,0",
        ),
        "stale-digest": (
            Completion(
                sample_id="stale-digest",
                code=ADD,
                problem_id=problem.problem_id,
                tests_digest="sha256:" + "0" * 64,
            ),
            "execute",
            "digest",
        ),
    }


async def test_poison_of_every_shape_is_dead_lettered_and_what_follows_is_scored(
    kafka: KafkaSettings,
) -> None:
    await ensure_topics(kafka, partitions=1)
    problem = ProblemRecord(problem_id="p1", digest=suite_digest(SUITE), tests=SUITE)
    poison = _poison_completions(problem)
    # Once a fence line that wedged the worker's event loop for hours; now simply judged.
    wedging = Completion(
        sample_id="wedging",
        response="```" + " " * MB + "`\n```python\n" + ADD + "```\n",
        tests=SUITE,
    )
    good = [_good("good-1"), wedging, _good("good-2")]
    async with running(worker(kafka, "w1")):
        async with RolloutProducer(kafka) as producer:
            await producer.publish_problem(problem)
            raw = AioClients(kafka).producer(ProducerOptions())
            async with kafkaio.running(raw):
                for key, (value, _, _) in _RAW_POISON.items():
                    await raw.send_and_wait(kafka.topics.completions, value, key=key)
            for completion, _, _ in poison.values():
                await producer.publish(completion)
            await producer.publish_many(good)
        rewards = [
            decode(v, RewardEvent)
            for v in await read_at_least(kafka, kafka.topics.rewards, 3, timeout_s=180)
        ]
        letters = {
            letter.key: letter
            for letter in (
                decode(v, DeadLetter)
                for v in await read_at_least(
                    kafka, kafka.topics.dlq, len(_RAW_POISON) + len(poison), timeout_s=60
                )
            )
        }
    expected = {key: (stage, why) for key, (_, stage, why) in _RAW_POISON.items()}
    expected |= {sid.encode(): (stage, why) for sid, (_, stage, why) in poison.items()}
    assert set(letters) == set(expected)
    for key, (stage, why) in expected.items():
        assert letters[key].stage == stage, (key, letters[key])
        assert why in letters[key].reason, (key, letters[key].reason)
    assert len(letters[b"fifteen-mb"].value) > 15 * MB  # the original, whole
    assert [r.sample_id for r in rewards] == ["good-1", "wedging", "good-2"]
    assert all(r.verdict is Verdict.ACCEPTED for r in rewards)


async def test_a_completion_over_the_topic_limit_is_refused_by_the_producer(
    kafka: KafkaSettings,
) -> None:
    """Past the 16 MiB the completions topic takes, the trainer is told at publish time."""
    await ensure_topics(kafka, partitions=1)
    huge = Completion(sample_id="huge", response="x" * (17 * MB), tests=SUITE)
    async with RolloutProducer(kafka) as producer:
        with pytest.raises(PublishError) as refused:
            await producer.publish(huge)
        assert not refused.value.retriable
        assert "MessageSizeTooLarge" in refused.value.reason
        await producer.publish(_good("after"))  # the producer is still usable
    (value,) = await read_at_least(kafka, kafka.topics.completions, 1, timeout_s=30)
    assert decode(value, Completion).sample_id == "after"


async def test_a_twenty_thousand_test_failing_suite_gets_its_reward(kafka: KafkaSettings) -> None:
    """Its whole RewardEvent would be ~2.6 MB: summarised, it fits the 1 MiB rewards topic.

    The first tests fail by their answers; a 3 s total budget leaves the rest "not run"
    (time_limit), so all 20,000 fail without minutes of harness time.
    """
    await ensure_topics(kafka, partitions=1)
    count = 20_000
    suite = IoSuite(
        inputs=[[i] for i in range(count)],
        outputs=[f"answer {i:06d} " + "=" * 40 for i in range(count)],
        fn_name="solve",
    )
    wrong = Completion(
        sample_id="big",
        batch_id="b",
        code="def solve(i):\n    return f'answer {i:06d} ' + '-' * 40\n",
        tests=suite,
        limits=Limits(time_s=1.0, total_time_s=3.0),
    )
    async with running(worker(kafka, "w1")):
        async with RolloutProducer(kafka) as producer:
            await producer.publish_many([wrong, _good("after")])
        rewards = {
            event.sample_id: event
            for event in (
                decode(v, RewardEvent)
                for v in await read_at_least(kafka, kafka.topics.rewards, 2, timeout_s=170)
            )
        }
    big = rewards["big"]
    assert (big.passed, big.total, big.score) == (0, count, 0)
    assert big.tests_summarised and 0 < len(big.tests) < count
    assert sum(big.test_verdicts.values()) == count
    assert big.test_verdicts[Verdict.WRONG_ANSWER] > 0  # the ones that ran, answered wrong
    assert len(encode(big)) < 1 << 20
    assert rewards["after"].verdict is Verdict.ACCEPTED  # the partition moved on
