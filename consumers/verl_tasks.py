"""verl's reward inputs as rewardbus messages, and rewardbus verdicts as verl results.

No verl import here: this is the pure half of the verl integration (the reward
manager in :mod:`consumers.verl_reward` is the thin shell around it).

What verl hands a reward function, per sample: ``data_source``, the decoded
response, ``reward_model["ground_truth"]`` and ``extra_info``. The ground truths
verl users' code datasets already carry, unchanged:

- ``input_output`` JSON (APPS, TACO, CodeContests, Codeforces; a JSON string or a
  dict): ``{"inputs": [...], "outputs": [...], "fn_name"?: ...}``. Without
  ``fn_name`` inputs are stdin and outputs expected stdout; with it each input is
  the call's arguments, one JSON value per line (verl's ``prime_code`` format) or a
  list, and each output the JSON of the return value (APPS wraps it in a list; the
  sandbox accepts both, as ``prime_code`` does).
- HumanEval: ``{"test": "def check(candidate): ...", "entry_point": "f"}``.
- MBPP: ``{"test_list": ["assert f(1) == 2", ...], "test_setup_code"?: "..."}``;
  each assert is one test, for fraction-of-tests scores.

A response with no Markdown fence is the program itself, as in verl's
``prime_code``; otherwise the worker takes the last fenced block in the language.
``extra_info["language"]`` names the language (default Python);
``extra_info["compare"]`` / ``["float_tolerance"]`` how stdout is compared (by
default, as the data source's own judge does: ``SOURCE_COMPARE``);
``extra_info["time_limit_s"]`` / ``["memory_limit_mb"]`` override the limits.

Errors::

    VerlInputError   the ground truth is not a test suite we understand (not retriable;
                     a ConsumerError, see consumers.errors)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from consumers.errors import ConsumerError
from schemas import (
    COMPARE_MODES,
    ENV_BOOTSTRAP,
    AssertSuite,
    Compare,
    Completion,
    IoSuite,
    Limits,
    ProblemRecord,
    RewardEvent,
    TestSuite,
    Verdict,
    kafka_settings,
    suite_digest,
)
from schemas.markdown import has_fence

__all__ = [
    "RESPONSE_LENGTH_ATTRIBUTE",
    "REWARD_EXTRA_KEYS",
    "SETTING_KEYS",
    "SOURCE_COMPARE",
    "VerlInputError",
    "VerlRewardSettings",
    "VerlTask",
    "failure_result",
    "reward_result",
    "suite_from_ground_truth",
    "task_from_verl",
]

# The Completion.attributes key of the response's length in tokens; the workers read
# the same key (sandbox_workers.metrics, which may not import this package).
RESPONSE_LENGTH_ATTRIBUTE = "response_length"

# verl takes the key set of reward_extra_info from the first sample of a batch:
# every result carries exactly these, in this order.
REWARD_EXTRA_KEYS = (
    "verdict",
    "pass_rate",
    "passed",
    "total",
    "exec_ms",
    "queue_ms",
    "cache_hit",
    "timed_out",
    "infra_failure",
)


# The options verl's config may give (reward.reward_kwargs.rewardbus.*).
SETTING_KEYS = frozenset(
    {
        "bootstrap_servers", "topic_prefix", "security_protocol", "sample_timeout_s",
        "failure_score",
        "default_language", "time_limit_s", "memory_limit_mb", "max_in_flight",
        "reply_replication_factor",
    }
)  # fmt: skip


class VerlInputError(ConsumerError):
    """A sample whose ground truth is no test suite rewardbus understands.

    Not retriable: the sample gets the failure score, flagged, and is counted.
    """


@dataclass(frozen=True)
class VerlRewardSettings:
    """How the verl integration reaches rewardbus and scores what cannot be judged.

    Read once from verl's config (``reward.reward_kwargs.rewardbus``, or the
    ``reward_kwargs`` of ``custom_reward_function``), with the cluster falling back
    to the ``REWARDBUS_*`` environment (:func:`schemas.kafka_settings`) so Ray actors
    can inherit it.
    """

    bootstrap_servers: str
    topic_prefix: str = ""
    security_protocol: str = "PLAINTEXT"
    # A sample that has no reward by then gets failure_score, flagged timed_out.
    sample_timeout_s: float = 300.0
    # The score of a sample whose reward is an infrastructure failure (timeout,
    # sandbox_error, unusable ground truth): flagged, counted, never an exception.
    failure_score: float = 0.0
    default_language: str = "python"
    limits: Limits = field(default_factory=Limits)
    # Completions awaiting their rewards in one process, at most (backpressure).
    max_in_flight: int = 4096
    reply_replication_factor: int | None = None  # None: min(3, brokers)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], env: Mapping[str, str]) -> VerlRewardSettings:
        """Settings from verl's config keys; raises ``ValueError`` naming what is missing."""
        unknown = sorted(set(options) - SETTING_KEYS)
        if unknown:
            raise ValueError(
                f"unknown rewardbus reward options {unknown} (known: {sorted(SETTING_KEYS)})"
            )
        kafka = kafka_settings(
            env,
            bootstrap=options.get("bootstrap_servers"),
            topic_prefix=_optional_str(options.get("topic_prefix")),
            security_protocol=options.get("security_protocol"),
        )
        if kafka is None:
            raise ValueError(
                "rewardbus needs a Kafka cluster: set reward.reward_kwargs.rewardbus."
                f"bootstrap_servers or {ENV_BOOTSTRAP}"
            )
        limits = Limits(
            time_s=float(options.get("time_limit_s", Limits().time_s)),
            memory_mb=int(options.get("memory_limit_mb", Limits().memory_mb)),
        )
        replication = options.get("reply_replication_factor")
        return cls(
            bootstrap_servers=kafka.bootstrap_servers,
            topic_prefix=kafka.topics.prefix,
            security_protocol=kafka.security_protocol,
            sample_timeout_s=float(options.get("sample_timeout_s", 300.0)),
            failure_score=float(options.get("failure_score", 0.0)),
            default_language=str(options.get("default_language", "python")),
            limits=limits,
            max_in_flight=int(options.get("max_in_flight", 4096)),
            reply_replication_factor=None if replication is None else int(replication),
        )


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class VerlTask:
    """One verl sample as rewardbus messages: the completion and its shared suite."""

    completion: Completion
    problem: ProblemRecord


def task_from_verl(
    *,
    sample_id: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None,
    settings: VerlRewardSettings,
    data_source: str = "",
    group_id: str = "",
    policy_version: int = 0,
    response_length: int | None = None,
) -> VerlTask:
    """The completion for one verl sample; its suite travels once, by ``problem_id``.

    Every sample of a GRPO group carries the same ground truth, so the same digest:
    the suite is published once to the problems topic and the completions only name
    it. Raises :class:`VerlInputError` for a ground truth that is no suite.
    ``response_length`` (tokens) rides in the completion's attributes, where the
    workers turn it into the response-length metric (docs/metrics.md).
    """
    info = extra_info or {}
    suite = suite_from_ground_truth(ground_truth, info, data_source=data_source)
    digest = suite_digest(suite)
    problem_id = "verl-" + digest.removeprefix("sha256:")[:32]
    completion = Completion(
        sample_id=sample_id,
        batch_id=group_id,
        group_id=group_id,
        policy_version=policy_version,
        language=str(info.get("language") or settings.default_language),
        # verl's prime_code judges an unfenced response as the program itself (a
        # completion-style model writes bare code); a fenced one goes to the
        # worker's extraction (the last block in the language).
        response=solution_str if has_fence(solution_str) else None,
        code=None if has_fence(solution_str) else solution_str,
        problem_id=problem_id,
        tests_digest=digest,
        limits=_limits(info, settings.limits),
        attributes=_attributes(data_source, response_length),
    )
    return VerlTask(completion, ProblemRecord(problem_id=problem_id, digest=digest, tests=suite))


def _attributes(data_source: str, response_length: int | None) -> dict[str, str]:
    attributes = {"data_source": str(data_source)} if data_source else {}
    if response_length is not None:
        attributes[RESPONSE_LENGTH_ATTRIBUTE] = str(response_length)
    return attributes


def suite_from_ground_truth(
    ground_truth: Any, extra_info: Mapping[str, Any] | None = None, *, data_source: str = ""
) -> TestSuite:
    """The test suite a verl ground truth describes (see the module docstring).

    ``extra_info["compare"]`` (one of ``schemas.COMPARE_MODES``) and
    ``["float_tolerance"]`` choose how stdout is compared; without them, the rule of
    the data source's own judge (``SOURCE_COMPARE``), else tokens.
    """
    spec = _plain(ground_truth)
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise VerlInputError(f"ground_truth is not JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise VerlInputError(f"ground_truth is a {type(spec).__name__}, not a test suite object")
    if "inputs" in spec or "outputs" in spec:
        return _io_suite(spec, extra_info or {}, data_source)
    if "test_list" in spec:
        return _mbpp_suite(spec)
    if "test" in spec:
        return _humaneval_suite(spec)
    raise VerlInputError(
        f"ground_truth has keys {sorted(spec)}: expected inputs/outputs(/fn_name), "
        "test/entry_point or test_list"
    )


def reward_result(event: RewardEvent, settings: VerlRewardSettings) -> dict[str, Any]:
    """verl's ``{"reward_score", "reward_extra_info"}`` for a judged sample."""
    infra = event.verdict == Verdict.SANDBOX_ERROR
    return {
        "reward_score": settings.failure_score if infra else float(event.score),
        "reward_extra_info": {
            "verdict": str(event.verdict),
            "pass_rate": event.passed / event.total if event.total else 0.0,
            "passed": event.passed,
            "total": event.total,
            "exec_ms": float(event.exec_ms),
            "queue_ms": float(event.queue_ms),
            "cache_hit": event.cache_hit,
            "timed_out": False,
            "infra_failure": infra,
        },
    }


def failure_result(
    verdict: str, settings: VerlRewardSettings, *, timed_out: bool
) -> dict[str, Any]:
    """The flagged result of a sample that got no usable reward."""
    return {
        "reward_score": settings.failure_score,
        "reward_extra_info": {
            "verdict": verdict,
            "pass_rate": 0.0,
            "passed": 0,
            "total": 0,
            "exec_ms": 0.0,
            "queue_ms": 0.0,
            "cache_hit": False,
            "timed_out": timed_out,
            "infra_failure": True,
        },
    }


# -- the suite shapes ---------------------------------------------------------------

# How each code data source's own judge compares stdout, where extra_info does not say
# (docs/verl.md lists each rule with its reference): APPS's testing_util and verl's
# prime_code compare stripped lines, and lines that hold one number with np.allclose
# (relative 1e-5); CodeContests' checker compares tokens ignoring case, numbers within
# 1e-5 absolute (its Codeforces problems too). Any other source compares tokens.
SOURCE_COMPARE: dict[str, tuple[Compare, float]] = {
    "apps": ("lines", 1e-5),
    "taco": ("lines", 1e-5),
    "codecontests": ("tokens_ci", 1e-5),
    "codeforces": ("tokens_ci", 1e-5),
}


def _io_suite(spec: dict[str, Any], info: Mapping[str, Any], data_source: str) -> IoSuite:
    inputs, outputs = spec.get("inputs"), spec.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise VerlInputError("input_output needs lists 'inputs' and 'outputs'")
    if len(inputs) != len(outputs):
        raise VerlInputError(f"input_output has {len(inputs)} inputs but {len(outputs)} outputs")
    if not inputs:
        raise VerlInputError("input_output has no test cases")
    compare, tolerance = SOURCE_COMPARE.get(data_source, ("tokens", 1e-6))
    if "compare" in info:
        compare, tolerance = info["compare"], 1e-6
    if compare not in COMPARE_MODES:
        raise VerlInputError(
            f"extra_info compare {compare!r} is not one of {', '.join(COMPARE_MODES)}"
        )
    tolerance = float(info.get("float_tolerance", tolerance))
    fn_name = spec.get("fn_name")
    if fn_name is None or fn_name == "":
        return IoSuite(
            inputs=[_text(i) for i in inputs],
            outputs=[_text(o) for o in outputs],
            compare=compare,
            float_tolerance=tolerance,
        )
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise VerlInputError(f"fn_name {fn_name!r} is not an identifier")
    return IoSuite(
        inputs=[_call_args(i, n) for n, i in enumerate(inputs)],
        outputs=[_json_value(o, n) for n, o in enumerate(outputs)],
        fn_name=fn_name,
        compare=compare,
        float_tolerance=tolerance,
    )


def _mbpp_suite(spec: dict[str, Any]) -> AssertSuite:
    cases = spec["test_list"]
    if not isinstance(cases, list) or not cases or not all(isinstance(c, str) for c in cases):
        raise VerlInputError("test_list must be a non-empty list of assert statements")
    setup = spec.get("test_setup_code") or ""
    imports = spec.get("test_imports") or []
    if not isinstance(setup, str) or not isinstance(imports, list):
        raise VerlInputError("test_setup_code must be a string and test_imports a list")
    code = "\n".join([*(str(line) for line in imports), setup]).strip()
    return AssertSuite(code=code, cases=list(cases))


def _humaneval_suite(spec: dict[str, Any]) -> AssertSuite:
    test, entry = spec.get("test"), spec.get("entry_point")
    if not isinstance(test, str) or not test.strip():
        raise VerlInputError("'test' must be the test code")
    if entry is not None and (not isinstance(entry, str) or not entry.isidentifier()):
        raise VerlInputError(f"entry_point {entry!r} is not an identifier")
    return AssertSuite(code=test, entry_point=entry)


def _call_args(value: Any, index: int) -> list[Any]:
    """One call's arguments: verl's one-JSON-value-per-line string, or a list."""
    if isinstance(value, list):
        return value
    if not isinstance(value, str):
        return [value]
    lines = value.rstrip("\n").split("\n")
    try:
        return [json.loads(line) for line in lines]
    except json.JSONDecodeError as exc:
        raise VerlInputError(f"fn_name input {index} is not JSON lines: {exc}") from None


def _json_value(value: Any, index: int) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise VerlInputError(f"fn_name output {index} is not JSON: {exc}") from None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # some datasets store stdin as a list of lines
        return "\n".join(str(line) for line in value)
    return str(value)


def _plain(value: Any) -> Any:
    """numpy arrays and scalars (parquet columns arrive so) as plain Python values."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _limits(info: Mapping[str, Any], defaults: Limits) -> Limits:
    time_s = info.get("time_limit_s")
    memory_mb = info.get("memory_limit_mb")
    if time_s is None and memory_mb is None:
        return defaults
    return Limits(
        time_s=float(time_s) if time_s is not None else defaults.time_s,
        total_time_s=defaults.total_time_s,
        memory_mb=int(memory_mb) if memory_mb is not None else defaults.memory_mb,
        output_kb=defaults.output_kb,
    )
