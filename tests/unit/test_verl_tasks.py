"""verl ground truths as rewardbus suites: how each data source's output is compared."""

from __future__ import annotations

import json

import pytest

from consumers.verl_tasks import (
    SOURCE_COMPARE,
    VerlInputError,
    VerlRewardSettings,
    suite_from_ground_truth,
    task_from_verl,
)
from schemas import IoSuite

STDIN_GT = json.dumps({"inputs": ["3\n"], "outputs": ["0.333333\n"]})
CALL_GT = json.dumps({"fn_name": "third", "inputs": ["3"], "outputs": ["0.333333"]})


def _io(
    ground_truth: str, extra_info: dict[str, object] | None = None, source: str = ""
) -> IoSuite:
    suite = suite_from_ground_truth(ground_truth, extra_info, data_source=source)
    assert isinstance(suite, IoSuite)
    return suite


@pytest.mark.parametrize(
    ("source", "compare", "tolerance"),
    [
        ("apps", "lines", 1e-5),
        ("taco", "lines", 1e-5),
        ("codecontests", "tokens_ci", 1e-5),
        ("codeforces", "tokens_ci", 1e-5),
        ("mbpp", "tokens", 1e-6),  # an io suite from any other source: tokens
        ("", "tokens", 1e-6),
    ],
)
def test_each_code_source_is_compared_as_its_own_judge_does(
    source: str, compare: str, tolerance: float
) -> None:
    suite = _io(STDIN_GT, source=source)
    assert (suite.compare, suite.float_tolerance) == (compare, tolerance)
    assert _io(CALL_GT, source=source).compare == compare  # return values: JSON, as before
    assert set(SOURCE_COMPARE) == {"apps", "taco", "codecontests", "codeforces"}


def test_extra_info_overrides_the_source_default() -> None:
    assert _io(STDIN_GT, {"compare": "float"}, "apps").float_tolerance == 1e-6
    chosen = _io(STDIN_GT, {"compare": "exact", "float_tolerance": 0.01}, "codeforces")
    assert (chosen.compare, chosen.float_tolerance) == ("exact", 0.01)
    assert _io(STDIN_GT, {"float_tolerance": 1e-3}, "apps").float_tolerance == 1e-3


def test_an_unknown_compare_mode_is_refused_by_name() -> None:
    with pytest.raises(VerlInputError, match="'fuzzy' is not one of exact, tokens, float"):
        _io(STDIN_GT, {"compare": "fuzzy"}, "apps")


ENV = {
    "REWARDBUS_BOOTSTRAP_SERVERS": "env:9092",
    "REWARDBUS_TOPIC_PREFIX": "env.",
    "REWARDBUS_SECURITY_PROTOCOL": "SSL",
}


def test_the_reward_settings_read_the_environment_as_the_cli_does() -> None:
    """verl's actors inherit the cluster from the environment, security protocol too
    (the reward path used to drop it and connect in PLAINTEXT); options win."""
    inherited = VerlRewardSettings.from_options({}, ENV)
    assert (inherited.bootstrap_servers, inherited.topic_prefix) == ("env:9092", "env.")
    assert inherited.security_protocol == "SSL"
    given = VerlRewardSettings.from_options(
        {"bootstrap_servers": "b:1", "topic_prefix": "", "security_protocol": "SASL_SSL"}, ENV
    )
    assert (given.bootstrap_servers, given.topic_prefix, given.security_protocol) == (
        "b:1",
        "",
        "SASL_SSL",
    )
    with pytest.raises(ValueError, match="REWARDBUS_BOOTSTRAP_SERVERS"):
        VerlRewardSettings.from_options({}, {})


@pytest.mark.parametrize(
    ("solution", "as_code"),
    [
        ('print("```")\n', True),  # a bare program with a fence inside a string literal
        ("x = '~~~ tilde'\nprint(x)\n", True),
        ("Here it is:\n```python\nprint(1)\n```\n", False),
        ("1. Solution:\n    ~~~\n    print(1)\n    ~~~\n", False),
    ],
)
def test_a_response_is_markdown_only_when_a_line_opens_a_fence(
    solution: str, as_code: bool
) -> None:
    """The worker extracts only fences that open a line; a bare program with three
    backticks inside a line used to be sent as Markdown, and no code was found in it."""
    task = task_from_verl(
        sample_id="s",
        solution_str=solution,
        ground_truth=json.dumps({"inputs": [""], "outputs": ["1\n"]}),
        extra_info=None,
        settings=VerlRewardSettings(bootstrap_servers="b:1"),
    )
    completion = task.completion
    assert (completion.code, completion.response) == (
        (solution, None) if as_code else (None, solution)
    )
