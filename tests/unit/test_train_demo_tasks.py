"""The train demo's pure parts: the task family, the grammar, the messages, the alerts."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from rewardbus.tokenizer import EOS_TOKEN, character_vocab
from rewardbus.train_demo.completions import step_samples, suite_for
from rewardbus.train_demo.grammar import ExpressionGrammar
from rewardbus.train_demo.monitor import (
    AlertCounters,
    AlertKind,
    AlertMonitor,
    AlertRules,
    StepRecord,
)
from rewardbus.train_demo.tasks import BEHAVIOURS, evaluate, local_score, task_family
from schemas import AssertSuite, Completion, decode, encode

GRAMMAR = ExpressionGrammar()
TASKS = task_family()


def sentences(grammar: ExpressionGrammar) -> list[str]:
    """Every sentence of the grammar."""
    out = []
    for operands in range(1, grammar.max_operands + 1):
        for picks in itertools.product(grammar.operands, repeat=operands):
            for ops in itertools.product(grammar.operators, repeat=operands - 1):
                text = picks[0] + "".join(o + p for o, p in zip(ops, picks[1:], strict=True))
                out.append(text)
    return out


def test_evaluate_follows_python_precedence() -> None:
    for text in sentences(GRAMMAR):
        for a, b in ((0, 3), (2, 0), (5, 7), (-4, 9)):
            # The reference for the local checker is Python itself on the same text.
            expected = eval(text, {}, {"a": a, "b": b})
            assert evaluate(text, a, b) == expected, text


@pytest.mark.parametrize("text", ["", "a+", "+a", "ab", "a/b", "a+c", "a**b"])
def test_evaluate_rejects_what_the_grammar_cannot_produce(text: str) -> None:
    assert evaluate(text, 1, 2) is None


def test_every_reference_is_a_sentence_and_passes_its_own_cases() -> None:
    for task in TASKS:
        assert GRAMMAR.accepts(task.behaviour.reference)
        assert local_score(task, task.behaviour.reference) == 1.0


def test_a_random_policy_earns_a_low_but_nonzero_reward() -> None:
    """The mean over all sentences (a uniform policy, roughly) sits in (0, 0.2]."""
    every = sentences(GRAMMAR)
    mean = sum(local_score(t, s) for t in TASKS for s in every) / (len(TASKS) * len(every))
    assert 0.0 < mean <= 0.2


def test_prompts_are_distinct_headers_and_programs_complete_them() -> None:
    headers = {task.header for task in TASKS}
    assert len(headers) == len(BEHAVIOURS)
    add = next(t for t in TASKS if t.name == "add")
    assert add.header == "def add(a, b):\n    return "
    assert add.program("a+b") == "def add(a, b):\n    return a+b\n"
    assert add.assert_cases()[0] == "assert add(6, 1) == 7"


def test_grammar_positions_alternate_and_end_with_eos() -> None:
    vocab = character_vocab()
    eos = vocab[EOS_TOKEN]
    table = GRAMMAR.allowed_ids(vocab, eos)
    assert len(table) == GRAMMAR.response_length == 2 * GRAMMAR.max_operands
    assert table[0] == [vocab[c] for c in GRAMMAR.operands]
    assert table[1] == [*(vocab[c] for c in GRAMMAR.operators), eos]
    assert table[-1] == [eos]


@given(st.text(alphabet="ab12+-*/c ", max_size=8))
def test_grammar_accepts_exactly_what_evaluate_understands(text: str) -> None:
    if GRAMMAR.accepts(text):
        assert evaluate(text, 3, 4) is not None


def test_step_samples_group_by_task_and_carry_the_tests() -> None:
    tasks = [t for t in TASKS[:2] for _ in range(3)]  # add, sub
    step = step_samples("run-step-0001", tasks, ["a"] * 6, policy_version=1, deadline_s=30, now=100)
    assert step.manifest.sample_ids == [f"run-step-0001/{i}" for i in range(6)]
    assert step.group_ids == ["run-step-0001/add"] * 3 + ["run-step-0001/sub"] * 3
    assert step.manifest.group_size == 3
    assert step.manifest.deadline == 130
    first = step.completions[0]
    assert first.code == "def add(a, b):\n    return a\n"
    assert first.tests == suite_for(tasks[0])
    assert isinstance(first.tests, AssertSuite)
    assert len(first.tests.cases) == 4
    assert decode(encode(first), Completion) == first


def test_step_samples_refuses_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="responses"):
        step_samples("b", TASKS[:2], ["a"], policy_version=0, deadline_s=1)


def _record(step: int, reward: float, length: float = 3.0) -> StepRecord:
    return StepRecord(
        step=step,
        reward_mean=reward,
        response_length=length,
        reward_latency_ms=10,
        rewards_per_s=100,
        step_s=0.1,
        samples=8,
    )


def test_reward_falling_alert_fires_after_five_falls_and_rearms() -> None:
    monitor = AlertMonitor(AlertRules(falling_steps=5))
    rewards = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.01]
    fired = [
        step for step, r in enumerate(rewards) for a in monitor.observe(_record(step, r))
        if a.kind is AlertKind.REWARD_FALLING
    ]  # fmt: skip
    assert fired == [5, 10]
    assert monitor.counts[AlertKind.REWARD_FALLING] == 2


def test_reward_falling_needs_consecutive_falls() -> None:
    monitor = AlertMonitor(AlertRules(falling_steps=5))
    rewards = [0.9, 0.8, 0.7, 0.6, 0.65, 0.5, 0.4, 0.3, 0.35, 0.3]
    alerts = [a for step, r in enumerate(rewards) for a in monitor.observe(_record(step, r))]
    assert alerts == []


def test_length_alert_fires_on_crossing_only() -> None:
    monitor = AlertMonitor(AlertRules(max_response_length=5.0))
    lengths = [4.0, 5.5, 6.0, 4.5, 5.1]
    fired = [
        step for step, n in enumerate(lengths) for a in monitor.observe(_record(step, 0.5, n))
        if a.kind is AlertKind.RESPONSE_LENGTH
    ]  # fmt: skip
    assert fired == [1, 4]
    assert monitor.counts == {AlertKind.REWARD_FALLING: 0, AlertKind.RESPONSE_LENGTH: 2}


def test_alerts_are_counted_as_opentelemetry_metrics(caplog: pytest.LogCaptureFixture) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    counters = AlertCounters(provider.get_meter("test"))
    monitor = AlertMonitor(AlertRules(max_response_length=1.0))
    for step in range(3):
        record = _record(step, 0.5, 2.0)
        counters.record(record, monitor.observe(record))
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        metric.name: [(dict(p.attributes or {}), p.value) for p in metric.data.data_points]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }
    assert points["rewardbus.train_demo.steps"] == [({}, 3)]
    assert points["rewardbus.train_demo.alerts"] == [({"alert": "response_length"}, 1)]
    assert "response_length" in caplog.text
    provider.shutdown()


def test_the_cli_offers_train_demo_without_importing_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from rewardbus import cli; "
        "help = cli.parser().format_help(); "
        "print('train-demo' in help, 'torch' in sys.modules, 'verl' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["True", "False", "False"]
