"""The shipped verl parity set is what docs/verl.md says it is.

Fast checks of the committed files only (no sandbox, no verl): size and coverage
of ``examples/verl/parity/cases.jsonl``, both ground truths describing the same
tests, rewardbus's mapping accepting every one, and the recorded scores lining up
with the cases. The scores themselves are checked by ``tests/verl/test_parity.py``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from consumers.verl_tasks import suite_from_ground_truth
from schemas import AssertSuite, IoSuite

PARITY = Path(__file__).resolve().parents[2] / "examples" / "verl" / "parity"
SOURCES = {"apps", "taco", "codecontests", "codeforces", "mbpp"}
# Kinds the issue asks the set to exercise (a case kind starting with each).
REQUIRED_KINDS = (
    "correct", "wrong", "partial", "too_slow", "crash", "hack_exit0", "hack_os_exit",
    "hack_fn_exception", "hack_none_output", "hack_always_equal", "hack_frame_peek",
    "syntax_error", "no_code",
)  # fmt: skip


def _jsonl(name: str) -> list[dict[str, Any]]:
    text = (PARITY / name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, PARITY / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cases() -> list[dict[str, Any]]:
    return _jsonl("cases.jsonl")


def test_the_set_is_big_and_covers_every_kind(cases: list[dict[str, Any]]) -> None:
    assert len(cases) >= 150
    assert len({c["case_id"] for c in cases}) == len(cases)
    assert {c["data_source"] for c in cases} == SOURCES
    kinds = {c["kind"] for c in cases}
    missing = [k for k in REQUIRED_KINDS if not any(kind.startswith(k) for kind in kinds)]
    assert missing == []
    assert all(0.0 <= c["expected_score"] <= 1.0 for c in cases)
    partial = [c for c in cases if 0.0 < c["expected_score"] < 1.0]
    assert len(partial) >= 20


def test_problems_have_enough_tests_for_partial_scores(cases: list[dict[str, Any]]) -> None:
    counts = {c["problem_id"]: c["test_count"] for c in cases}
    assert min(counts.values()) >= 5
    assert sum(n > 10 for n in counts.values()) >= 3  # prime_code scores only the first 10


def test_both_ground_truths_describe_the_same_tests(cases: list[dict[str, Any]]) -> None:
    for case in cases:
        verl_io = json.loads(case["verl_ground_truth"])
        assert len(verl_io["inputs"]) == len(verl_io["outputs"]) == case["test_count"]
        assert len(case["expected_per_test"]) == case["test_count"]
        suite = suite_from_ground_truth(case["ground_truth"])
        if case["data_source"] == "mbpp":
            assert isinstance(suite, AssertSuite)
            assert len(suite.cases) == case["test_count"]
            assert verl_io["fn_name"]
        else:
            assert case["ground_truth"] == case["verl_ground_truth"]
            assert isinstance(suite, IoSuite)
            assert len(suite.inputs) == case["test_count"]


def test_fn_name_problems_include_leetcode_classes_and_plain_functions(
    cases: list[dict[str, Any]],
) -> None:
    calls = [c for c in cases if json.loads(c["verl_ground_truth"]).get("fn_name")]
    assert any("class Solution" in c["response"] for c in calls)
    assert any("class Solution" not in c["response"] for c in calls)


def test_recorded_scores_line_up_with_the_cases(cases: list[dict[str, Any]]) -> None:
    ids = [c["case_id"] for c in cases]
    recorded = (("verl_scores.jsonl", "verl_score"), ("rewardbus_scores.jsonl", "rewardbus_score"))
    for name, key in recorded:
        rows = _jsonl(name)
        assert [r["case_id"] for r in rows] == ids, name
        assert all(0.0 <= r[key] <= 1.0 for r in rows)
        expected = {c["case_id"]: c["expected_score"] for c in cases}
        assert all(r["expected_score"] == expected[r["case_id"]] for r in rows), name


def test_the_dataset_has_one_prompt_per_problem(cases: list[dict[str, Any]]) -> None:
    to_parquet = _module("to_parquet")
    rows = to_parquet.problem_rows(cases, "train")
    assert len(rows) == len({c["problem_id"] for c in cases})
    for row in rows:
        assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
        assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"]
        assert row["ability"] == "code"
        assert row["reward_model"]["style"] == "rule"
        # The column holds one type: a JSON string that the mapping reads.
        assert isinstance(row["reward_model"]["ground_truth"], str)
        suite_from_ground_truth(row["reward_model"]["ground_truth"])
        assert row["extra_info"]["split"] == "train"
