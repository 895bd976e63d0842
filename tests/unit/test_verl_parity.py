"""The parity set's pure half: distinct repeats, the documented disagreements, agreement counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.verl_parity import (
    ParityCase,
    agreement,
    distinct_response,
    documented_disagreements,
    load_cases,
    load_verl_scores,
    repeat_cases,
    verl_data_source,
)
from consumers.verl_tasks import VerlRewardSettings, task_from_verl
from sandbox_workers.extract import extract_code

TAG = "rep-7"


def rewardbus_program(response: str) -> str | None:
    """What a rewardbus worker judges for a verl response: the mapping, then extraction."""
    completion = task_from_verl(
        sample_id="s",
        solution_str=response,
        ground_truth={"inputs": ["1\n"], "outputs": ["1\n"]},
        extra_info={},
        settings=VerlRewardSettings("unused:9092"),
    ).completion
    if completion.code is not None:
        return completion.code
    return extract_code(completion.response or "", "python")


def prime_code_program(response: str) -> str:
    """What verl's prime_code judges (verl/utils/reward_score/prime_code/__init__.py)."""
    return response.rsplit("```python", maxsplit=1)[-1].split("```", maxsplit=1)[0]


RESPONSES = {
    "fenced": "Here it is.\n\n```python\nprint(1)\n```\n\nDone.\n",
    "unfenced": "import sys\nprint(sys.stdin.read())\n",
    "bare fence": "```\nprint(1)\n```\n",
    "py fence": "```py\nprint(1)\n```",
    "unclosed": "Try this:\n```python\nprint(1)\n",
    "draft then answer": "```python\nprint(0)\n```\nBetter:\n```python\nprint(1)\n```\n",
    "code then output": "```python\nprint(3)\n```\nOutput:\n```\n3\n```\n",
    "indented": "Steps:\n  ```python\n  print(1)\n  ```\n",
}


@pytest.mark.parametrize("name", sorted(RESPONSES))
def test_a_distinct_repeat_changes_the_program_both_judges_see(name: str) -> None:
    response = RESPONSES[name]
    tagged = distinct_response(response, TAG)
    ours = rewardbus_program(tagged)
    assert ours is not None and TAG in ours
    assert ours.replace(f"# {TAG}\n", "") == rewardbus_program(response)
    if "```python" in response or "```" not in response:
        assert TAG in prime_code_program(tagged)
    # The program itself is unchanged: only a comment line was added.
    assert tagged.replace(f"# {TAG}\n", "").removesuffix(f"\n# {TAG}") == response


def test_an_unfenced_program_keeps_its_first_line() -> None:
    """prime_code keeps leading imports at module level: the tag must not come before them."""
    response = "from sys import stdout\nstdout.write('1\\n')\n"
    tagged = distinct_response(response, TAG)
    assert tagged.splitlines()[0] == "from sys import stdout"
    assert tagged == response + f"# {TAG}\n"
    assert distinct_response("print(1)", TAG) == f"print(1)\n# {TAG}"


def test_every_repeat_of_the_shipped_set_is_a_program_of_its_own() -> None:
    """bench_verl's repeats change the code a rewardbus worker runs: no cache hits."""
    cases = load_cases(Path(__file__).resolve().parents[2] / "examples/verl/parity/cases.jsonl")
    for case in cases:
        program = rewardbus_program(case.response)
        tagged = rewardbus_program(distinct_response(case.response, TAG))
        if program is not None:
            assert tagged is not None and tagged != program, case.case_id


def test_the_comment_is_in_the_language_of_the_block() -> None:
    tagged = distinct_response("```cpp\nint main() {}\n```\n", TAG)
    assert tagged == f"```cpp\n// {TAG}\nint main() {{}}\n```\n"


def test_a_tag_must_be_one_line() -> None:
    with pytest.raises(ValueError, match="one line"):
        distinct_response("print(1)\n", "a\nb")


def test_repeats_cycle_through_the_cases_and_are_all_distinct() -> None:
    cases = [_case("a", "```python\nprint(1)\n```"), _case("b", "print(2)\n")]
    samples = repeat_cases(cases, 5, "run1")
    assert [s.case.case_id for s in samples] == ["a", "b", "a", "b", "a"]
    assert len({s.response for s in samples}) == 5
    assert len({s.sample_id for s in samples}) == 5


def test_mbpp_goes_to_verl_as_apps_and_code_sources_as_they_are() -> None:
    assert verl_data_source(_case("a", "", data_source="mbpp")) == "apps"
    assert verl_data_source(_case("a", "", data_source="taco")) == "taco"


DOC = """# verl

## How it was measured

| `not-a-disagreement` | table elsewhere |

## Disagreements with verl (every case)

| case | verl | expected | why |
|---|---|---|---|
| `apps-x/hack` | 1.0 | 0.0 | peeks at the judge |
| `taco-y/float` | 0.0 | 1.0 | float compare |

### Notes

| `mbpp-z/sub` | in a subsection, still listed |

## Next section

| `after-the-section` | not listed |
"""


def test_the_documented_disagreements_are_the_rows_of_that_section() -> None:
    assert documented_disagreements(DOC) == {"apps-x/hack", "taco-y/float", "mbpp-z/sub"}


def test_a_doc_without_the_section_is_an_error() -> None:
    with pytest.raises(ValueError, match="Disagreements"):
        documented_disagreements("# verl\n\nnothing here\n")


def test_agreement_counts() -> None:
    expected = [1.0, 0.5, 0.0, 1.0]
    ours = [1.0, 0.5, 0.0, 0.0]
    theirs = [1.0, 0.0, 0.0, 0.0]
    result = agreement(expected, ours, theirs)
    assert (result.samples, result.ours_right, result.theirs_right) == (4, 3, 2)
    assert (result.same, result.same_where_theirs_right) == (3, 2)
    assert result.as_json()["rewardbus_matches_verl_where_verl_right"] == 1.0


def test_cases_and_verl_scores_load(tmp_path: Path) -> None:
    line = {
        "case_id": "a", "data_source": "apps", "kind": "correct", "response": "print(1)\n",
        "ground_truth": "{}", "verl_ground_truth": "{}", "extra_info": {"language": "python"},
        "expected_score": 1.0, "note": "extra fields are ignored",
    }  # fmt: skip
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps(line) + "\n\n")
    assert load_cases(cases) == [_case("a", "print(1)\n", extra_info={"language": "python"})]
    cases.write_text(json.dumps(line) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="twice"):
        load_cases(cases)
    scores = tmp_path / "verl_scores.jsonl"
    scores.write_text(json.dumps({"case_id": "a", "verl_score": 0.5, "wall_s": 1.25}) + "\n")
    assert load_verl_scores(scores)["a"].score == 0.5
    assert load_verl_scores(scores)["a"].wall_s == 1.25
    assert load_verl_scores(scores)["a"].stable  # one pass recorded: nothing to disagree with


def test_a_case_verl_scored_differently_across_passes_is_unstable(tmp_path: Path) -> None:
    rows = [
        {"case_id": "gc", "verl_score": 1.0, "wall_s": 1.8, "verl_scores_seen": [0.0, 1.0]},
        {"case_id": "ok", "verl_score": 0.5, "wall_s": 0.7, "verl_scores_seen": [0.5]},
        {"case_id": "noted", "verl_score": 1, "verl_scores_seen": [1], "unstable_because": "CI"},
    ]
    scores = tmp_path / "verl_scores.jsonl"
    scores.write_text("".join(json.dumps(row) + "\n" for row in rows))
    loaded = load_verl_scores(scores)
    assert not loaded["gc"].stable
    assert loaded["gc"].seen == (0.0, 1.0)
    assert loaded["ok"].stable
    assert not loaded["noted"].stable  # moved in CI, though not in the recorded passes


def _case(
    case_id: str,
    response: str,
    *,
    data_source: str = "apps",
    extra_info: dict[str, str] | None = None,
) -> ParityCase:
    return ParityCase(
        case_id=case_id,
        data_source=data_source,
        kind="correct",
        response=response,
        ground_truth="{}",
        verl_ground_truth="{}",
        expected_score=1.0,
        extra_info=extra_info or {},
    )
