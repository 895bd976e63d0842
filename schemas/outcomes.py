"""Keeping a reward's per-test outcomes under the rewards topic's record limit.

A :class:`~schemas.messages.RewardEvent` carries one
:class:`~schemas.messages.TestOutcome` per test, and the rewards topic keeps
Kafka's default limit of about 1 MiB per record: a CodeContests suite of tens of
thousands of failing tests, each with its message, would not fit, and a reward
the topic refuses is a sample lost. So past a bound the outcomes are
*summarised*: the event keeps the first :data:`SUMMARY_FAILURES` failing tests
(their messages cut to :data:`SUMMARY_MESSAGE_CHARS`), ``tests_summarised`` says
so, and ``test_verdicts`` counts every test's verdict. ``passed``, ``total`` and
``score`` are always computed from every test, before summarising.

The bound is in encoded bytes, not a count alone, because one test's message can
be kilobytes. Whatever the suite, a summarised event's tests encode to at most
about ``SUMMARY_FAILURES * (SUMMARY_MESSAGE_CHARS * 4 + 64)`` bytes (~420 KiB).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from schemas.messages import RewardEvent, TestOutcome, Verdict

__all__ = [
    "MAX_OUTCOME_MESSAGE_BYTES",
    "MAX_TEST_OUTCOMES",
    "SUMMARY_FAILURES",
    "SUMMARY_MESSAGE_CHARS",
    "BoundedOutcomes",
    "bound_outcomes",
    "bounded_reward",
]

# Up to this many outcomes, with messages of this many UTF-8 bytes in all, are kept
# whole (~100 bytes each without the message: ~100 KiB + 384 KiB at most).
MAX_TEST_OUTCOMES = 1000
MAX_OUTCOME_MESSAGE_BYTES = 384 << 10
# Past either bound: the first this-many failing tests, each message cut to this.
SUMMARY_FAILURES = 100
SUMMARY_MESSAGE_CHARS = 1024


@dataclass(frozen=True)
class BoundedOutcomes:
    """What a reward carries about its tests: ``tests``, and whether they are a summary.

    ``verdicts`` counts every test's verdict (empty when nothing was summarised:
    ``tests`` then holds them all).
    """

    tests: list[TestOutcome]
    summarised: bool = False
    verdicts: dict[Verdict, int] = field(default_factory=dict)


def bound_outcomes(outcomes: Sequence[TestOutcome]) -> BoundedOutcomes:
    """``outcomes`` whole if they fit the bounds, else their summary (see the module doc)."""
    if len(outcomes) <= MAX_TEST_OUTCOMES and _message_bytes(outcomes) <= MAX_OUTCOME_MESSAGE_BYTES:
        return BoundedOutcomes(list(outcomes))
    failing = (o for o in outcomes if o.verdict is not Verdict.ACCEPTED)
    kept = [_shortened(o) for o, _ in zip(failing, range(SUMMARY_FAILURES), strict=False)]
    counts = Counter(o.verdict for o in outcomes)
    return BoundedOutcomes(kept, summarised=True, verdicts=dict(counts))


def _message_bytes(outcomes: Sequence[TestOutcome]) -> int:
    total = 0
    for outcome in outcomes:
        total += len(outcome.message.encode("utf-8", "replace"))
        if total > MAX_OUTCOME_MESSAGE_BYTES:
            break
    return total


def _shortened(outcome: TestOutcome) -> TestOutcome:
    if len(outcome.message) <= SUMMARY_MESSAGE_CHARS:
        return outcome
    return msgspec.structs.replace(outcome, message=outcome.message[:SUMMARY_MESSAGE_CHARS])


def bounded_reward(event: RewardEvent) -> RewardEvent:
    """``event`` with its outcomes bounded (itself when they fit, or are a summary already)."""
    if event.tests_summarised:
        return event
    bounded = bound_outcomes(event.tests)
    if not bounded.summarised:
        return event
    return msgspec.structs.replace(
        event, tests=bounded.tests, tests_summarised=True, test_verdicts=bounded.verdicts
    )
