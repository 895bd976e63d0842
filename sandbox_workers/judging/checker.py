"""Special judges (checkers), testlib-compatible.

A checker is invoked as ``checker input.txt output.txt answer.txt`` (the test's
input, the program's output, the expected answer) and answers with its exit
status:

====  ================================  =====================================
exit  testlib meaning                   verdict
====  ================================  =====================================
0     ok                                accepted
1     wrong answer                      wrong_answer
2     presentation error                wrong_answer
3     checker failure ("fail")          sandbox_error (the judge is broken)
7     partial points                    accepted only with full points
====  ================================  =====================================

A number in [0, 1] on the first line of the checker's stdout is the test's score
(partial credit); without one, ok scores 1 and anything else 0. A test counts as
passed only with a score of 1. Any other exit, a crash or a checker timeout is a
``sandbox_error``: the program is not blamed for a broken judge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sandbox_workers.judging.classify import describe_exit
from sandbox_workers.sandbox import ExecResult
from schemas import Verdict

__all__ = ["ANSWER_FILE", "INPUT_FILE", "OUTPUT_FILE", "CheckerVerdict", "interpret_checker"]

INPUT_FILE = "input.txt"
OUTPUT_FILE = "output.txt"
ANSWER_FILE = "answer.txt"

_OK, _WRONG, _PRESENTATION, _FAIL, _POINTS = 0, 1, 2, 3, 7


@dataclass(frozen=True)
class CheckerVerdict:
    """What a checker said about one test."""

    verdict: Verdict
    score: float
    message: str = ""


def interpret_checker(result: ExecResult) -> CheckerVerdict:
    """Turn the checker's execution into the test's verdict and score."""
    clean = not (result.timed_out or result.memory_exceeded or result.output_exceeded)
    code = result.exit_code if clean and result.signal is None else None
    comment = _comment(result)
    if code in (_OK, _WRONG, _PRESENTATION, _POINTS):
        points = _points(result.stdout)
        score = points if points is not None else (1.0 if code == _OK else 0.0)
        passed = code in (_OK, _POINTS) and score >= 1.0
        return CheckerVerdict(
            verdict=Verdict.ACCEPTED if passed else Verdict.WRONG_ANSWER,
            score=score,
            message=comment,
        )
    if code == _FAIL:
        return CheckerVerdict(Verdict.SANDBOX_ERROR, 0.0, f"checker failed: {comment}"[:300])
    return CheckerVerdict(Verdict.SANDBOX_ERROR, 0.0, f"checker crashed: {describe_exit(result)}")


def _points(stdout: bytes) -> float | None:
    first = stdout.split(b"\n", 1)[0].strip()
    try:
        value = float(first)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def _comment(result: ExecResult) -> str:
    # testlib writes its comment ("ok 3 numbers", "wrong answer ...") to stderr.
    for stream in (result.stderr, result.stdout):
        text = stream[:2048].decode("utf-8", errors="replace").strip()
        if text:
            return text.splitlines()[0][:200]
    return ""
