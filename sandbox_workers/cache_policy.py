"""What the result cache may share, and how a reward becomes an entry and back.

Only results that would come out the same on any healthy worker are shared:
:func:`cacheable` says which, :func:`trusted` checks entries read back (old or
foreign writers), :func:`to_cached` and :func:`to_reward` convert. Pure: no I/O.
"""

from __future__ import annotations

from schemas import CachedResult, Completion, RewardEvent, TestOutcome, Verdict

__all__ = ["cacheable", "to_cached", "to_reward", "trusted"]

# Verdicts that say more about the worker than about the program.
_UNTRUSTED = frozenset({Verdict.SANDBOX_ERROR, Verdict.TIME_LIMIT})


def cacheable(event: RewardEvent) -> bool:
    """Whether ``event`` may stand for every later execution with its fingerprint.

    Never: an infrastructure fault (``sandbox_error``); a time limit, on the
    whole or on any test, since it may have been measured under overload;
    anything judged by a degraded sandbox; a result that is itself a cache hit
    (its entry is already shared, and re-sharing would launder its age).
    """
    if event.cache_hit or event.degraded or event.verdict in _UNTRUSTED:
        return False
    return not _untrusted_tests(event.tests, event.test_verdicts)


def to_cached(fingerprint: str, event: RewardEvent, *, worker_id: str = "") -> CachedResult:
    """The judged fields of ``event``, keyed by ``fingerprint``."""
    return CachedResult(
        fingerprint=fingerprint,
        score=event.score,
        verdict=event.verdict,
        passed=event.passed,
        total=event.total,
        tests=event.tests,
        tests_summarised=event.tests_summarised,
        test_verdicts=event.test_verdicts,
        stdout_tail=event.stdout_tail,
        stderr_tail=event.stderr_tail,
        message=event.message,
        program_index=event.program_index,
        exec_ms=event.exec_ms,
        worker_id=event.worker_id or worker_id,
    )


def to_reward(cached: CachedResult, completion: Completion) -> RewardEvent:
    """The reward of ``completion`` from a cached result: its ids, the cached judgement.

    ``exec_ms`` is 0 (nothing ran); ``queue_ms`` and ``worker_id`` are the
    service's to fill in, as for any reward.
    """
    return RewardEvent(
        sample_id=completion.sample_id,
        batch_id=completion.batch_id,
        group_id=completion.group_id,
        policy_version=completion.policy_version,
        score=cached.score,
        verdict=cached.verdict,
        passed=cached.passed,
        total=cached.total,
        tests=cached.tests,
        tests_summarised=cached.tests_summarised,
        test_verdicts=cached.test_verdicts,
        stdout_tail=cached.stdout_tail,
        stderr_tail=cached.stderr_tail,
        message=cached.message,
        program_index=cached.program_index,
        exec_ms=0.0,
        cache_hit=True,
    )


def trusted(entry: CachedResult) -> bool:
    """Whether :func:`cacheable` could have let ``entry`` through (old or foreign writers)."""
    return entry.verdict not in _UNTRUSTED and not _untrusted_tests(
        entry.tests, entry.test_verdicts
    )


def _untrusted_tests(tests: list[TestOutcome], verdicts: dict[Verdict, int]) -> bool:
    # A summarised result keeps only some tests: its counts cover the rest.
    return any(test.verdict in _UNTRUSTED for test in tests) or any(
        verdicts.get(verdict, 0) for verdict in _UNTRUSTED
    )
