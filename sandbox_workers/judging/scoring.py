"""From per-test outcomes to the completion's score and verdict, and the time budget."""

from __future__ import annotations

from dataclasses import dataclass

from schemas import TestOutcome, Verdict

__all__ = ["Budget", "Score", "charge_s", "score_tests"]


@dataclass(frozen=True)
class Score:
    """The completion's reward."""

    score: float
    verdict: Verdict
    passed: int


def score_tests(outcomes: list[TestOutcome], total: int, *, all_or_nothing: bool) -> Score:
    """Fraction passed (checker partial scores averaged), or 0/1 when all-or-nothing.

    The verdict is ``accepted`` when every one of ``total`` tests passed, else
    the verdict of the first test that did not. Tests that never ran (stopped at
    the first failure) count as not passed.
    """
    passed = sum(1 for outcome in outcomes if outcome.verdict is Verdict.ACCEPTED)
    failure = next((o.verdict for o in outcomes if o.verdict is not Verdict.ACCEPTED), None)
    if total > 0 and passed == total:
        return Score(score=1.0, verdict=Verdict.ACCEPTED, passed=passed)
    verdict = failure if failure is not None else Verdict.SANDBOX_ERROR
    if all_or_nothing or total == 0:
        return Score(score=0.0, verdict=verdict, passed=passed)
    earned = sum(min(max(outcome.score, 0.0), 1.0) for outcome in outcomes)
    return Score(score=earned / total, verdict=verdict, passed=passed)


def charge_s(cpu_ms: float, wall_ms: float, waited_ms: float = 0.0) -> float:
    """Seconds an execution takes off a time budget (the harnesses charge the same).

    Its CPU time, or its wall time less the time it spent waiting for a CPU
    when that is more: a busy host (which stretches wall time with waiting) does
    not use a budget up, a program that sleeps or blocks still does.
    """
    return max(cpu_ms, wall_ms - waited_ms) / 1000


class Budget:
    """The completion's total run time (``Limits.total_time_s``).

    Only the program's own executions spend it: compiling and checking do not,
    so a slow checker cannot push a correct program over its limit. Each
    execution is charged :func:`charge_s`.
    """

    def __init__(self, total_s: float) -> None:
        self._left_s = total_s

    @property
    def left_s(self) -> float:
        """Seconds still available (never negative)."""
        return max(self._left_s, 0.0)

    @property
    def exhausted(self) -> bool:
        """Whether no meaningful time is left for another test."""
        return self._left_s <= 0.001

    def spend(self, cpu_ms: float, wall_ms: float, waited_ms: float = 0.0) -> None:
        """Charge an execution: ``cpu_ms`` of CPU time in ``wall_ms``, ``waited_ms`` for a CPU."""
        self._left_s -= charge_s(cpu_ms, wall_ms, waited_ms)
