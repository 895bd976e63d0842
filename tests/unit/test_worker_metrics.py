"""Labels and inputs of the worker's metrics (the exported series are tested live in
tests/observability/test_metrics.py)."""

from __future__ import annotations

from consumers.verl_tasks import RESPONSE_LENGTH_ATTRIBUTE, VerlRewardSettings, task_from_verl
from sandbox_workers import metrics
from schemas import Completion


def test_language_aliases_share_one_series_and_unknown_names_one_more() -> None:
    assert metrics.language_label(Completion(sample_id="a", language="Python3")) == "python"
    assert metrics.language_label(Completion(sample_id="b", language="py")) == "python"
    assert metrics.language_label(Completion(sample_id="c", language="brainfudge")) == "unknown"


def test_the_trainer_side_and_the_worker_agree_on_the_response_length_key() -> None:
    assert RESPONSE_LENGTH_ATTRIBUTE == metrics.RESPONSE_LENGTH_ATTRIBUTE
    task = task_from_verl(
        sample_id="s",
        solution_str="print(1)",
        ground_truth={"inputs": [""], "outputs": ["1\n"]},
        extra_info={},
        settings=VerlRewardSettings(bootstrap_servers="127.0.0.1:1"),
        data_source="apps",
        response_length=37,
    )
    assert task.completion.attributes == {"data_source": "apps", "response_length": "37"}
    assert metrics._response_length(task.completion) == 37.0


def test_a_malformed_response_length_is_ignored() -> None:
    for raw in ("many", "-3"):
        completion = Completion(sample_id="x", attributes={"response_length": raw})
        assert metrics._response_length(completion) is None
