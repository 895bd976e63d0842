"""Per-test outcomes stay under the rewards topic's record limit, flagged when summarised."""

from __future__ import annotations

import msgpack
import msgspec

from sandbox_workers.cache_policy import cacheable, to_cached, to_reward, trusted
from schemas import (
    CachedResult,
    Completion,
    RewardEvent,
    TestOutcome,
    Verdict,
    bound_outcomes,
    bounded_reward,
    decode,
    encode,
)
from schemas.outcomes import MAX_TEST_OUTCOMES, SUMMARY_FAILURES, SUMMARY_MESSAGE_CHARS

# Kafka's default max.message.bytes (the rewards and result-cache topics keep it),
# less room for the record's key, headers and batch framing.
TOPIC_LIMIT = 1_048_588 - (16 << 10)


def _outcomes(n: int, *, message: str = "", every_nth_passes: int = 0) -> list[TestOutcome]:
    return [
        TestOutcome(
            index=i,
            verdict=Verdict.ACCEPTED
            if every_nth_passes and i % every_nth_passes == 0
            else Verdict.WRONG_ANSWER,
            wall_ms=12.5,
            cpu_ms=11.25,
            peak_memory_kb=9_000,
            message=message,
        )
        for i in range(n)
    ]


def _event(tests: list[TestOutcome], **fields: object) -> RewardEvent:
    passed = sum(t.verdict is Verdict.ACCEPTED for t in tests)
    return RewardEvent(
        sample_id="s",
        batch_id="b",
        verdict=Verdict.WRONG_ANSWER,
        passed=passed,
        total=len(tests),
        score=passed / len(tests),
        tests=tests,
        message="m" * 4096,
        stdout_tail="o" * 2048,
        stderr_tail="e" * 2048,
        **fields,  # type: ignore[arg-type]
    )


def test_a_suite_within_the_bounds_is_kept_whole_and_not_flagged() -> None:
    tests = _outcomes(MAX_TEST_OUTCOMES, message="expected 3, got 4")
    event = bounded_reward(_event(tests))
    assert event.tests == tests
    assert not event.tests_summarised and event.test_verdicts == {}


def test_twenty_thousand_failing_tests_are_summarised_under_the_topic_limit() -> None:
    # The worst message a test can carry: 4 KiB of 4-byte characters.
    tests = _outcomes(20_000, message="\U0001f600" * 4096, every_nth_passes=3)
    whole = _event(tests)
    assert len(encode(whole)) > 50 * TOPIC_LIMIT  # what used to be sent
    event = bounded_reward(whole)
    size = len(encode(event))
    assert size < TOPIC_LIMIT, size
    assert event.tests_summarised
    assert len(event.tests) == SUMMARY_FAILURES
    assert all(t.verdict is Verdict.WRONG_ANSWER for t in event.tests)
    assert [t.index for t in event.tests[:3]] == [1, 2, 4]  # the first failing ones, in order
    assert all(len(t.message) == SUMMARY_MESSAGE_CHARS for t in event.tests)
    assert event.test_verdicts == {Verdict.ACCEPTED: 6667, Verdict.WRONG_ANSWER: 13_333}
    # Scores come from every test, never from the summary.
    assert (event.passed, event.total, event.score) == (whole.passed, 20_000, whole.score)


def test_few_tests_with_huge_messages_are_summarised_too() -> None:
    bounded = bound_outcomes(_outcomes(200, message="x" * 4096))
    assert bounded.summarised and len(bounded.tests) == SUMMARY_FAILURES


def test_a_summary_is_not_summarised_again() -> None:
    once = bounded_reward(_event(_outcomes(5_000)))
    assert bounded_reward(once) is once


def test_events_without_the_new_fields_still_decode_as_whole() -> None:
    """Older workers' events (no tests_summarised / test_verdicts) read as before."""
    old = msgpack.packb(
        {
            "sample_id": "s",
            "verdict": "wrong_answer",
            "tests": [{"index": 0, "verdict": "wrong_answer"}],
            "schema_version": 1,
        }
    )
    event = decode(old, RewardEvent)
    assert not event.tests_summarised and event.test_verdicts == {}
    assert [t.index for t in event.tests] == [0]


class _OldRewardEvent(msgspec.Struct, kw_only=True):
    """A consumer built before the summary fields existed (the fields it knew)."""

    sample_id: str
    verdict: str
    passed: int = 0
    total: int = 0
    tests: list[TestOutcome] = []
    schema_version: int = 1


def test_older_consumers_read_a_summarised_event() -> None:
    event = bounded_reward(_event(_outcomes(5_000)))
    old = msgspec.msgpack.decode(encode(event), type=_OldRewardEvent)
    assert (old.passed, old.total, len(old.tests)) == (0, 5_000, SUMMARY_FAILURES)


def test_the_summary_travels_through_the_result_cache() -> None:
    event = bounded_reward(_event(_outcomes(5_000)))
    cached = decode(encode(to_cached("fp", event)), CachedResult)
    back = to_reward(cached, Completion(sample_id="other"))
    assert back.tests_summarised and back.test_verdicts == event.test_verdicts
    assert back.tests == event.tests


def test_a_time_limit_hidden_by_the_summary_still_keeps_the_result_out_of_the_cache() -> None:
    tests = _outcomes(5_000)
    tests[-1] = msgspec.structs.replace(tests[-1], verdict=Verdict.TIME_LIMIT)
    event = bounded_reward(_event(tests))
    assert all(t.verdict is not Verdict.TIME_LIMIT for t in event.tests)  # not among those kept
    assert not cacheable(event)
    assert not trusted(to_cached("fp", event))
