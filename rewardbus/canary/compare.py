"""Compare a canary's reward with what a healthy judge gives it. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from rewardbus.canary.golden import Canary
from schemas import RewardEvent, Verdict

__all__ = ["SCORE_TOLERANCE", "Mismatch", "compare"]

# Scores are fractions of tests passed; anything beyond float noise is a real difference.
SCORE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Mismatch:
    """How a reward differs from its canary's expectation."""

    expected: Verdict
    actual: Verdict
    expected_score: float | None
    actual_score: float
    worker_id: str

    @property
    def reason(self) -> str:
        """One line for logs, span status and reports."""
        if self.actual is not self.expected:
            what = f"verdict {self.actual.value}, expected {self.expected.value}"
        else:
            what = f"score {self.actual_score:.4g}, expected {self.expected_score:.4g}"
        return f"{what} (worker {self.worker_id or 'unknown'})"


def compare(canary: Canary, event: RewardEvent) -> Mismatch | None:
    """None when ``event`` is what a healthy judge gives ``canary``, else how it differs.

    The verdict must be the expected one; when the canary names a score, the score
    must equal it (within :data:`SCORE_TOLERANCE`). A ``sandbox_error`` is a
    mismatch like any other: the judge failed to judge a program it must judge.
    """
    verdict_ok = event.verdict is canary.expect
    score_ok = canary.score is None or abs(event.score - canary.score) <= SCORE_TOLERANCE
    if verdict_ok and score_ok:
        return None
    return Mismatch(
        expected=canary.expect,
        actual=event.verdict,
        expected_score=canary.score,
        actual_score=event.score,
        worker_id=event.worker_id,
    )
