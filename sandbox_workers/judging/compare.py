"""Comparing a program's output with the expected one.

Text modes (stdin/stdout tests):

- ``exact``: line by line, ignoring trailing whitespace on each line and
  trailing blank lines (a missing final newline is not a wrong answer);
  ``\\r\\n`` counts as ``\\n``.
- ``tokens`` (the default): the whitespace-separated tokens are equal.
- ``float``: tokens, where two numeric tokens match within ``tolerance``
  (absolute or relative); two integer tokens must be equal.
- ``lines``: the rule of APPS's judge and verl's ``prime_code`` (the default for
  verl's ``apps`` and ``taco`` data). The lines (any line break), each stripped,
  blank ones dropped, are equal; failing that, where every line on both sides is
  one number and not all of them are plain digits, each pair within ``tolerance``
  relative to the expected one plus 1e-8 (``np.allclose``). Spacing inside a line
  counts; letter case counts.
- ``tokens_ci``: the rule of CodeContests' checker (the default for verl's
  ``codecontests`` and ``codeforces`` data). Tokens equal ignoring ASCII case,
  two numeric tokens within ``tolerance`` absolute; two integer tokens must be
  equal (the checker compares them as doubles too, which only matters past 2**53).

Values (function-call tests) compare as JSON values: lists and tuples alike,
``1 == 1.0``, floats within tolerance in ``float`` mode, and — as verl's
``prime_code`` does for APPS — an expected value that is a one-element list
also matches its element.

Rows (SQL) compare cell by cell; without ORDER BY in the query, as multisets.
"""

from __future__ import annotations

import math
import re
from typing import Any

from schemas import Compare

__all__ = [
    "Compare",
    "call_result_matches",
    "parse_rows",
    "rows_match",
    "text_matches",
    "values_equal",
]


_INTEGER = re.compile(r"[+-]?\d+")
# np.allclose's absolute term, which the ``lines`` mode adds to its relative tolerance.
_ALLCLOSE_ATOL = 1e-8
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def text_matches(actual: str, expected: str, mode: Compare, tolerance: float = 1e-6) -> bool:
    """Whether program output ``actual`` is accepted against ``expected``."""
    if mode == "exact":
        return _lines(actual) == _lines(expected)
    if mode == "lines":
        return _stripped_lines_match(actual, expected, tolerance)
    got, want = actual.split(), expected.split()
    if mode == "tokens":
        return got == want
    if mode == "tokens_ci":
        got, want = [g.lower() for g in got], [w.lower() for w in want]
    absolute = mode == "tokens_ci"
    return len(got) == len(want) and all(
        _token_matches(g, w, tolerance, absolute=absolute) for g, w in zip(got, want, strict=True)
    )


def values_equal(actual: Any, expected: Any, tolerance: float | None = None) -> bool:
    """JSON-value equality; numbers within ``tolerance`` when one is given."""
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(
            values_equal(a, e, tolerance) for a, e in zip(actual, expected, strict=True)
        )
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(
            values_equal(actual[key], expected[key], tolerance) for key in expected
        )
    if _is_number(actual) and _is_number(expected):
        return _numbers_equal(actual, expected, tolerance)
    if isinstance(actual, (list, tuple, dict)) or isinstance(expected, (list, tuple, dict)):
        return False
    return bool(actual == expected)


def call_result_matches(actual: Any, expected: Any, tolerance: float | None = None) -> bool:
    """A function's return value against an APPS-style expected output.

    APPS/TACO wrap many expected return values in a one-element list; verl's
    ``prime_code`` accepts either form, and so do we.
    """
    if values_equal(actual, expected, tolerance):
        return True
    return (
        isinstance(expected, list)
        and len(expected) == 1
        and values_equal(actual, expected[0], tolerance)
    )


def parse_rows(text: str, separator: str = "|") -> list[tuple[str, ...]]:
    """Rows of ``sqlite3 -list`` style output; cells are stripped, blank lines dropped."""
    return [
        tuple(cell.strip() for cell in line.split(separator))
        for line in text.replace("\r\n", "\n").split("\n")
        if line.strip()
    ]


def rows_match(
    actual: str, expected: str, *, ordered: bool, mode: Compare, tolerance: float = 1e-6
) -> bool:
    """Whether two result sets are equal (as lists if ``ordered``, else as multisets)."""
    got, want = parse_rows(actual), parse_rows(expected)
    if len(got) != len(want):
        return False
    if not ordered:
        got, want = sorted(got), sorted(want)
    numeric = mode == "float"
    return all(
        len(g) == len(w)
        and all(
            _token_matches(a, e, tolerance) if numeric else a == e
            for a, e in zip(g, w, strict=True)
        )
        for g, w in zip(got, want, strict=True)
    )


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _stripped_lines_match(actual: str, expected: str, tolerance: float) -> bool:
    got = [line.strip() for line in actual.splitlines() if line.strip()]
    want = [line.strip() for line in expected.splitlines() if line.strip()]
    if got == want:
        return True
    if len(got) != len(want):
        return False
    if all(g.isdigit() and w.isdigit() for g, w in zip(got, want, strict=True)):
        return False  # integers only: they had to be equal
    try:
        pairs = [(float(g), float(w)) for g, w in zip(got, want, strict=True)]
    except ValueError:  # a line that is not one number
        return False
    return all(abs(g - w) <= _ALLCLOSE_ATOL + tolerance * abs(w) for g, w in pairs)


def _token_matches(got: str, want: str, tolerance: float, *, absolute: bool = False) -> bool:
    if got == want:
        return True
    if _INTEGER.fullmatch(got) and _INTEGER.fullmatch(want):
        return _integer(got) == _integer(want)
    if _DECIMAL.fullmatch(got) and _DECIMAL.fullmatch(want):
        if absolute:
            return abs(float(got) - float(want)) < tolerance
        return _numbers_equal(float(got), float(want), tolerance)
    return False


def _integer(token: str) -> str:
    """An integer token in one spelling (no +, no leading zeros, no -0).

    Compared as text: ``int()`` refuses more than 4300 digits, and a program's
    output may hold any number of them.
    """
    digits = token.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if token.startswith("-") and digits != "0" else digits


def _is_number(value: Any) -> bool:
    # Booleans fall through to ``==`` (True == 1, as prime_code compares), but
    # never get a numeric tolerance.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numbers_equal(a: float, b: float, tolerance: float | None) -> bool:
    if a == b:
        return True
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if tolerance is None:
        return False
    return math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance)
