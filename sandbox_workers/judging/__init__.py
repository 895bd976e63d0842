"""Judging: comparison modes, verdict classification, harnesses, checkers, scoring."""

from __future__ import annotations

from sandbox_workers.judging.checker import CheckerVerdict, interpret_checker
from sandbox_workers.judging.classify import failure_verdict, mentions_out_of_memory
from sandbox_workers.judging.compare import (
    Compare,
    call_result_matches,
    parse_rows,
    rows_match,
    text_matches,
    values_equal,
)
from sandbox_workers.judging.scoring import Budget, Score, score_tests

__all__ = [
    "Budget",
    "CheckerVerdict",
    "Compare",
    "Score",
    "call_result_matches",
    "failure_verdict",
    "interpret_checker",
    "mentions_out_of_memory",
    "parse_rows",
    "rows_match",
    "score_tests",
    "text_matches",
    "values_equal",
]
