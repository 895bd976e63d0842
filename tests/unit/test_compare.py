"""The pure parts of judging: comparison, classification, checker protocol, scoring."""

from __future__ import annotations

import json
import math
import signal

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox_workers.judging import (
    Budget,
    call_result_matches,
    failure_verdict,
    interpret_checker,
    rows_match,
    score_tests,
    text_matches,
    values_equal,
)
from sandbox_workers.judging.harness import new_markers, parse_records, strip_markers
from sandbox_workers.judging.protocol import HarnessRecord
from sandbox_workers.sandbox import ExecResult
from schemas import COMPARE_MODES, TestOutcome, Verdict

# --- text ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("actual", "expected", "mode", "same"),
    [
        ("3\n", "3", "exact", True),
        ("1 2\r\n3\r\n", "1 2\n3\n", "exact", True),
        ("1 2  \n3\n\n\n", "1 2\n3", "exact", True),
        ("1  2\n", "1 2\n", "exact", False),
        ("1\n2\n", "1 2\n", "exact", False),
        ("1\n2\n", "1 2\n", "tokens", True),
        ("1 2 3", "1 2", "tokens", False),
        ("", "", "tokens", True),
        ("0.3333333", "0.333333333", "float", True),
        ("0.34", "0.333333333", "float", False),
        ("1e9", "1000000000.0000001", "float", True),
        ("YES 0.5", "YES 0.5000000001", "float", True),
        ("NO 0.5", "YES 0.5", "float", False),
        ("123456789012345678901", "123456789012345678902", "float", False),
        ("-0", "0", "float", True),
    ],
)
def test_text_modes(actual: str, expected: str, mode: str, same: bool) -> None:
    assert text_matches(actual, expected, mode, 1e-6) is same  # type: ignore[arg-type]


_token = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1
)
_gap = st.text(alphabet=" \t\n\r", min_size=1, max_size=4)


@given(tokens=st.lists(_token, max_size=12), data=st.data())
def test_tokens_mode_ignores_whitespace(tokens: list[str], data: st.DataObject) -> None:
    gaps = data.draw(st.lists(_gap, min_size=len(tokens) + 1, max_size=len(tokens) + 1))
    spaced = gaps[0] + "".join(t + g for t, g in zip(tokens, gaps[1:], strict=True))
    assert text_matches(spaced, " ".join(tokens), "tokens")
    assert text_matches(spaced, " ".join(tokens), "float")


@given(text=st.text())
def test_every_mode_is_reflexive(text: str) -> None:
    for mode in COMPARE_MODES:
        assert text_matches(text, text, mode)


@given(
    value=st.floats(min_value=-1e12, max_value=1e12, allow_nan=False),
    nudge=st.floats(min_value=-0.4, max_value=0.4),
)
def test_float_mode_accepts_within_tolerance(value: float, nudge: float) -> None:
    tolerance = 1e-6
    close = value + nudge * tolerance * max(1.0, abs(value))
    assert text_matches(repr(close), repr(value), "float", tolerance)


@given(value=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_float_mode_rejects_beyond_tolerance(value: float) -> None:
    tolerance = 1e-6
    far = value + 10 * tolerance * max(1.0, abs(value))
    assert not text_matches(repr(far), repr(value), "float", tolerance)


# --- values (function-call tests) ---------------------------------------------


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        ([1, 2], [1, 2], True),
        ((1, 2), [1, 2], True),
        ([[1, 2], (3, 4)], [[1, 2], [3, 4]], True),
        (1, 1.0, True),
        ({"a": [1]}, {"a": [1]}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ("1", 1, False),
        ([1], 1, False),
        (None, None, True),
        (0.1 + 0.2, 0.3, False),
    ],
)
def test_values_equal(actual: object, expected: object, same: bool) -> None:
    assert values_equal(actual, expected) is same


def test_values_float_tolerance_only_when_asked() -> None:
    assert values_equal([0.1 + 0.2], [0.3], 1e-9)
    assert not values_equal([0.1 + 0.2], [0.3])


def test_apps_one_element_list_wrapping() -> None:
    # APPS stores many expected return values as [value]; prime_code accepts both.
    assert call_result_matches(5, [5])
    assert call_result_matches([1, 2], [[1, 2]])
    assert call_result_matches([5], [5])
    assert not call_result_matches(6, [5])
    assert not call_result_matches(5, [5, 5])


@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_values_survive_a_json_round_trip(value: object) -> None:
    assert values_equal(json.loads(json.dumps(value)), value)


# --- rows (SQL) ---------------------------------------------------------------


def test_rows_unordered_compare_as_multisets() -> None:
    assert rows_match("2|b\n1|a\n", "1|a\n2|b", ordered=False, mode="tokens")
    assert not rows_match("2|b\n1|a\n", "1|a\n2|b", ordered=True, mode="tokens")
    assert not rows_match("1|a\n1|a\n", "1|a\n", ordered=False, mode="tokens")


def test_rows_cells_are_stripped_and_numbers_tolerant_in_float_mode() -> None:
    assert rows_match("1 | x \n", "1|x", ordered=True, mode="tokens")
    assert rows_match("0.33333333|x", "0.333333334|x", ordered=True, mode="float")
    assert not rows_match("0.3|x", "0.333333334|x", ordered=True, mode="float")


# --- classification ---------------------------------------------------------------


def result(**overrides: object) -> ExecResult:
    fields: dict[str, object] = {
        "exit_code": 0,
        "signal": None,
        "stdout": b"",
        "stderr": b"",
        "wall_ms": 1.0,
        "cpu_ms": 1.0,
        "peak_memory_kb": 1000,
    }
    fields.update(overrides)
    return ExecResult(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "verdict"),
    [
        ({}, None),
        ({"timed_out": True, "exit_code": None, "signal": 9}, Verdict.TIME_LIMIT),
        ({"exit_code": None, "signal": signal.SIGXCPU}, Verdict.TIME_LIMIT),
        ({"memory_exceeded": True, "exit_code": None, "signal": 9}, Verdict.MEMORY_LIMIT),
        ({"output_exceeded": True}, Verdict.OUTPUT_LIMIT),
        ({"exit_code": None, "signal": signal.SIGXFSZ}, Verdict.OUTPUT_LIMIT),
        ({"exit_code": 1, "stderr": b"Traceback...\nZeroDivisionError"}, Verdict.RUNTIME_ERROR),
        ({"exit_code": None, "signal": signal.SIGSEGV}, Verdict.RUNTIME_ERROR),
        ({"exit_code": 1, "stderr": b"Traceback...\nMemoryError\n"}, Verdict.MEMORY_LIMIT),
        (
            {"exit_code": 1, "stderr": b"java.lang.OutOfMemoryError: Java heap space"},
            Verdict.MEMORY_LIMIT,
        ),
        (
            {"exit_code": 1, "stderr": b"System.OutOfMemoryException: Insufficient memory"},
            Verdict.MEMORY_LIMIT,
        ),
        (
            {"exit_code": None, "signal": 6, "stderr": b"what():  std::bad_alloc"},
            Verdict.MEMORY_LIMIT,
        ),
        (
            {"exit_code": None, "signal": 6, "stderr": b"memory allocation of 80 bytes failed"},
            Verdict.MEMORY_LIMIT,
        ),
        (
            {"exit_code": 134, "stderr": b"FATAL ERROR: JavaScript heap out of memory"},
            Verdict.MEMORY_LIMIT,
        ),
        ({"exit_code": 2, "stderr": b"xrealloc: cannot allocate 335 bytes"}, Verdict.MEMORY_LIMIT),
        # Flags beat symptoms: a timed-out program that also printed an OOM line.
        ({"timed_out": True, "exit_code": 1, "stderr": b"MemoryError"}, Verdict.TIME_LIMIT),
    ],
)
def test_failure_verdict(overrides: dict[str, object], verdict: Verdict | None) -> None:
    assert failure_verdict(result(**overrides)) is verdict


# --- checker protocol -------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "verdict", "score"),
    [
        ({"exit_code": 0}, Verdict.ACCEPTED, 1.0),
        (
            {"exit_code": 1, "stderr": b"wrong answer expected 3, found 4"},
            Verdict.WRONG_ANSWER,
            0.0,
        ),
        ({"exit_code": 2}, Verdict.WRONG_ANSWER, 0.0),
        ({"exit_code": 3}, Verdict.SANDBOX_ERROR, 0.0),
        ({"exit_code": 0, "stdout": b"0.25\nfine"}, Verdict.WRONG_ANSWER, 0.25),
        ({"exit_code": 0, "stdout": b"1.0\n"}, Verdict.ACCEPTED, 1.0),
        ({"exit_code": 7, "stdout": b"0.5\n"}, Verdict.WRONG_ANSWER, 0.5),
        ({"exit_code": 0, "stdout": b"17\n"}, Verdict.ACCEPTED, 1.0),
        ({"exit_code": 42}, Verdict.SANDBOX_ERROR, 0.0),
        ({"exit_code": None, "signal": 11}, Verdict.SANDBOX_ERROR, 0.0),
        ({"timed_out": True, "exit_code": 0}, Verdict.SANDBOX_ERROR, 0.0),
    ],
)
def test_checker_protocol(overrides: dict[str, object], verdict: Verdict, score: float) -> None:
    said = interpret_checker(result(**overrides))
    assert (said.verdict, said.score) == (verdict, score)


# --- scoring -----------------------------------------------------------------------


def outcome(index: int, verdict: Verdict, score: float | None = None) -> TestOutcome:
    if score is None:
        score = 1.0 if verdict is Verdict.ACCEPTED else 0.0
    return TestOutcome(index=index, verdict=verdict, score=score)


def test_score_is_the_fraction_passed_and_verdict_the_first_failure() -> None:
    outcomes = [
        outcome(0, Verdict.ACCEPTED),
        outcome(1, Verdict.TIME_LIMIT),
        outcome(2, Verdict.WRONG_ANSWER),
        outcome(3, Verdict.ACCEPTED),
    ]
    scored = score_tests(outcomes, 4, all_or_nothing=False)
    assert (scored.score, scored.verdict, scored.passed) == (0.5, Verdict.TIME_LIMIT, 2)
    assert score_tests(outcomes, 4, all_or_nothing=True).score == 0.0


def test_all_passed_is_accepted_and_partial_checker_scores_average() -> None:
    assert score_tests([outcome(0, Verdict.ACCEPTED)], 1, all_or_nothing=True).score == 1.0
    partial = [outcome(0, Verdict.ACCEPTED), outcome(1, Verdict.WRONG_ANSWER, 0.5)]
    assert score_tests(partial, 2, all_or_nothing=False).score == 0.75


def test_tests_that_never_ran_count_as_failed() -> None:
    # stop_on_first_failure: 1 of 5 tests ran and failed.
    scored = score_tests([outcome(0, Verdict.WRONG_ANSWER)], 5, all_or_nothing=False)
    assert (scored.score, scored.passed, scored.verdict) == (0.0, 0, Verdict.WRONG_ANSWER)


def test_budget_is_spent_by_cpu_time_or_wall_time_not_spent_waiting_for_a_cpu() -> None:
    budget = Budget(1.0)
    budget.spend(400, 1500, waited_ms=1150)  # CPU-bound, slowed down by load: its CPU time
    assert budget.left_s == pytest.approx(0.6)
    budget.spend(10, 300)  # asleep: its wall time
    assert budget.left_s == pytest.approx(0.3)
    budget.spend(700, 700)
    assert budget.exhausted and budget.left_s == 0.0


# --- harness records -------------------------------------------------------------


def test_records_need_their_own_marker_and_the_first_one_counts() -> None:
    first, second = new_markers(2)
    forged = f'{"0" * 32} {{"verdict": "accepted"}}'
    stdout = (
        f'noise\n{forged}\n{first} {{"verdict": "accepted"}}\n'
        f'{first} {{"verdict": "wrong_answer"}}\nprinted {second} {{"verdict": "accepted"}}\n'
    ).encode()
    records = parse_records(stdout, [first, second])
    assert records[0] == HarnessRecord(verdict="accepted")
    assert records[1] is None  # a marker mid-line is not a record


def test_a_record_is_typed_and_a_malformed_one_is_a_sandbox_error() -> None:
    markers = new_markers(6)
    bodies = [
        b'{"verdict": "returned", "value": null, "wall_ms": 1.5, "cpu_ms": 1, "peak_memory_kb": 9}',
        b'{"verdict": "returned", "value": NaN}',  # Python's json: a call may return NaN
        b'{"verdict": "returned", "repr": "<object>"}',
        b'{"verdict": "accepted", "wall_ms": "soon"}',
        b'{"verdict": "exited", "exit": 0, "limit": "later"}',
        b'{"verdict": "returned", "value": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    ]
    lines = zip(markers, bodies, strict=True)
    stdout = b"".join(marker.encode() + b" " + body + b"\n" for marker, body in lines)
    returned, nan, shown, late, limited, deep = parse_records(stdout, markers)
    assert returned == HarnessRecord(
        verdict="returned", value=None, wall_ms=1.5, cpu_ms=1.0, peak_memory_kb=9
    )
    assert nan is not None and math.isnan(nan.value)
    assert shown is not None and shown.value is msgspec.UNSET and shown.value_repr == "<object>"
    assert late is not None and late.verdict == "sandbox_error"
    assert late.message.startswith("malformed harness record: ") and "wall_ms" in late.message
    assert limited is not None and limited.verdict == "sandbox_error" and "limit" in limited.message
    assert deep is None  # deeper than the worker's stack: no record (the test reported none)


def test_markers_are_unique_and_stripped_from_the_tail() -> None:
    markers = new_markers(50)
    assert len(set(markers)) == 50
    stdout = f'hello\n\n{markers[0]} {{"verdict": "accepted"}}\nbye'.encode()
    assert strip_markers(stdout, markers) == b"hello\nbye"


# --- the reference judges' rules (docs/verl.md: verdicts by data source) ---------------


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        ("10 20 \n30", "10 20\n30\n", True),  # trailing spaces
        ("5\n\n\n", "5\n", True),  # blank trailing lines
        ("\n5", "5\n", True),  # a leading blank line
        ("1 2\r\n3\r\n", "1 2\n3\n", True),  # CRLF
        ("ab  cd", "ab cd", False),  # spacing inside a line counts
        ("10 20", "10\n20", False),
        ("0.3333333333333333", "0.333333", True),  # more digits, within 1e-5 relative
        ("0.33", "0.333333", False),
        ("1e-07", "0.0000001", True),
        ("15.0", "15", True),
        ("-5.0\n2", "-5\n2", True),
        ("2 2.5", "2 2.500000", False),  # only lines that hold one number get a tolerance
        ("007", "7", False),  # plain digits on every line: compared as text
        ("True", "true", False),  # case counts
        ("nan", "nan", True),
    ],
)
def test_lines_mode_is_prime_codes_rule(actual: str, expected: str, same: bool) -> None:
    assert text_matches(actual, expected, "lines", 1e-5) is same


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        ("ab  cd\n", "ab cd", True),  # whitespace-separated tokens
        ("10 20", "10\n20", True),
        ("3 4.5", "3 4.500000", True),  # every numeric token within 1e-5 absolute
        ("1 1e-07", "1 0.0000001", True),
        ("0.000001", "0.000002", True),
        ("1000000.1", "1000000.0", False),  # absolute, not relative
        ("0.3333", "0.333333", False),
        ("True", "true", True),  # ASCII case ignored
        ("YES", "yes", True),
        ("Alice", "alice", True),
        ("12345678901234567891", "12345678901234567890", False),  # integers exactly
        ("-007", "-7", True),
        ("-0", "0", True),
        ("9" * 20_000, "9" * 20_000 + "8", False),  # past int()'s 4300 digits: still a verdict
        ("1 2", "1 2 3", False),
    ],
)
def test_tokens_ci_mode_is_codecontests_rule(actual: str, expected: str, same: bool) -> None:
    assert text_matches(actual, expected, "tokens_ci", 1e-5) is same
