"""The message structs of the wire contract (DESIGN.md §4).

Every struct is frozen and keyword-only; every top-level message carries
``schema_version``. New fields must get defaults so that old producers and new
consumers (and the reverse) keep working.
"""

from __future__ import annotations

import enum
import time
from typing import Annotated, Any, ClassVar, Literal, get_args

import msgspec

__all__ = [
    "COMPARE_MODES",
    "DEAD_LETTER_ERROR_TYPES",
    "DEAD_LETTER_STAGES",
    "SCHEMA_VERSION",
    "AssertSuite",
    "BatchManifest",
    "CheckerProgram",
    "CheckerSuite",
    "Compare",
    "Completion",
    "DeadLetter",
    "DeadLetterErrorType",
    "DeadLetterStage",
    "GroupStats",
    "IoSuite",
    "Limits",
    "ProblemRecord",
    "RewardEvent",
    "ScoredBatch",
    "ScoredSample",
    "TestOutcome",
    "TestSuite",
    "Verdict",
    "program_sample_id",
    "unpack_programs",
]

SCHEMA_VERSION = 1

# How stdout is compared (sandbox_workers.judging.compare says what each mode accepts).
Compare = Literal["exact", "tokens", "float", "lines", "tokens_ci"]
COMPARE_MODES: tuple[Compare, ...] = get_args(Compare)
NonNegative = Annotated[float, msgspec.Meta(ge=0)]
Positive = Annotated[float, msgspec.Meta(gt=0)]
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]


def _now() -> float:
    return time.time()


class Verdict(enum.StrEnum):
    """The outcome of judging one test or one completion."""

    ACCEPTED = "accepted"
    WRONG_ANSWER = "wrong_answer"
    RUNTIME_ERROR = "runtime_error"
    TIME_LIMIT = "time_limit"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    COMPILE_ERROR = "compile_error"
    NO_CODE = "no_code"
    # An infrastructure fault: retried, and if it persists reported as such,
    # never silently scored as a wrong answer.
    SANDBOX_ERROR = "sandbox_error"


class Limits(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Resource limits for one completion (per test unless named otherwise)."""

    time_s: Positive = 5.0
    total_time_s: Positive = 60.0
    memory_mb: PositiveInt = 512
    output_kb: PositiveInt = 1024
    compile_time_s: Positive = 30.0
    compile_memory_mb: PositiveInt = 2048


class _SuiteOptions(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    stop_on_first_failure: bool = False
    all_or_nothing: bool = False


class IoSuite(_SuiteOptions, frozen=True, kw_only=True, tag="io", tag_field="kind"):
    """Input/output cases, the APPS/TACO/CodeContests shape.

    Without ``fn_name`` each input is a stdin string and each output the expected
    stdout. With ``fn_name`` each input is the list of call arguments (JSON values)
    and each output the expected return value.
    """

    inputs: list[Any]
    outputs: list[Any]
    fn_name: str | None = None
    compare: Compare = "tokens"
    float_tolerance: NonNegative = 1e-6


class AssertSuite(_SuiteOptions, frozen=True, kw_only=True, tag="assert", tag_field="kind"):
    """HumanEval/MBPP style: test ``code`` defining ``check(candidate)``.

    With ``entry_point`` the harness calls ``check(<entry_point>)``; without it the
    test code runs as-is after the program. Each entry of ``cases`` (assert
    statements) is a separate test, for fraction-of-tests scoring.
    """

    code: str = ""
    entry_point: str | None = None
    cases: list[str] = []


class CheckerProgram(msgspec.Struct, frozen=True, kw_only=True):
    """A special judge: invoked as ``checker INPUT OUTPUT ANSWER``."""

    language: str
    code: str


class CheckerSuite(_SuiteOptions, frozen=True, kw_only=True, tag="checker", tag_field="kind"):
    """I/O cases judged by a checker program (testlib-compatible exit codes)."""

    inputs: list[str]
    outputs: list[str]
    checker: CheckerProgram


TestSuite = IoSuite | AssertSuite | CheckerSuite


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """One model completion to judge; key on the wire is ``sample_id``.

    ``programs`` packs several candidate programs into one message (one test
    suite, one round trip): program ``i`` is judged as its own sample,
    ``program_sample_id(sample_id, i)``, and gets its own RewardEvent with
    ``program_index=i``. List those ids in the batch manifest.
    """

    sample_id: str
    batch_id: str = ""
    group_id: str = ""
    policy_version: int = 0
    language: str = "python"
    response: str | None = None
    code: str | None = None
    programs: list[str] = []
    tests: TestSuite | None = None
    problem_id: str | None = None
    tests_digest: str | None = None
    limits: Limits = Limits()
    created_at: float = msgspec.field(default_factory=_now)
    attributes: dict[str, str] = {}
    # Where the RewardEvent goes instead of the rewards topic: a per-client reply
    # topic (``Topics.reply_topic``) for callers that wait on their own rewards one by
    # one, such as verl's reward-loop workers. Workers refuse any other destination.
    reply_topic: str | None = None
    schema_version: int = SCHEMA_VERSION


def program_sample_id(sample_id: str, index: int) -> str:
    """The sample id of program ``index`` of a multi-program completion."""
    return f"{sample_id}#{index}"


def unpack_programs(completion: Completion) -> list[tuple[int, Completion]]:
    """One single-program completion per packed program (or the completion itself)."""
    if not completion.programs:
        return [(0, completion)]
    return [
        (
            index,
            msgspec.structs.replace(
                completion,
                sample_id=program_sample_id(completion.sample_id, index),
                code=program,
                response=None,
                programs=[],
            ),
        )
        for index, program in enumerate(completion.programs)
    ]


class TestOutcome(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The result of one test case."""

    # Keeps pytest from mistaking this struct for a test class.
    __test__: ClassVar[bool] = False

    index: int
    verdict: Verdict
    wall_ms: float = 0.0
    cpu_ms: float = 0.0
    peak_memory_kb: int = 0
    score: float = 0.0
    message: str = ""


class RewardEvent(msgspec.Struct, frozen=True, kw_only=True):
    """The judged reward of one completion; key on the wire is ``batch_id``."""

    sample_id: str
    batch_id: str = ""
    group_id: str = ""
    policy_version: int = 0
    score: float = 0.0
    verdict: Verdict
    passed: int = 0
    total: int = 0
    tests: list[TestOutcome] = []
    # Past a bound (``schemas.outcomes``) ``tests`` holds only the first failing tests:
    # this says so, and ``test_verdicts`` then counts every test's verdict. Added
    # with defaults, so events without them (older workers) read as whole.
    tests_summarised: bool = False
    test_verdicts: dict[Verdict, int] = {}
    stdout_tail: str = ""
    stderr_tail: str = ""
    message: str = ""
    queue_ms: float = 0.0
    exec_ms: float = 0.0
    worker_id: str = ""
    cache_hit: bool = False
    attempt: int = 1
    # Isolation layers that were missing when this sample ran (degraded mode).
    degraded: list[str] = []
    program_index: int = 0
    created_at: float = msgspec.field(default_factory=_now)
    schema_version: int = SCHEMA_VERSION


class BatchManifest(msgspec.Struct, frozen=True, kw_only=True):
    """What a batch consists of; key on the wire is ``batch_id``.

    ``group_ids`` (optional) runs parallel to ``sample_ids`` so that missing
    samples can still be placed in their group.
    """

    batch_id: str
    sample_ids: list[str]
    group_ids: list[str] = []
    group_size: int = 1
    policy_version: int = 0
    deadline: float = 0.0
    created_at: float = msgspec.field(default_factory=_now)
    schema_version: int = SCHEMA_VERSION


class ScoredSample(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One sample of a scored batch, in manifest order.

    ``masked`` samples carry no training signal: their reward is missing at the
    deadline (``present=False``) or is an infrastructure fault (verdict
    ``sandbox_error``). They are left out of their group's statistics and get
    advantage 0; a learner must not train on them.
    """

    sample_id: str
    group_id: str = ""
    present: bool = True
    score: float = 0.0
    verdict: Verdict | None = None
    advantage: float = 0.0
    passed: int = 0
    total: int = 0
    cache_hit: bool = False
    masked: bool = False
    # The policy that generated the sample (from its RewardEvent), for staleness checks.
    policy_version: int = 0


class GroupStats(msgspec.Struct, frozen=True, kw_only=True):
    """Score statistics of one GRPO group (present, unmasked samples only)."""

    mean: float
    std: float
    count: int


class ScoredBatch(msgspec.Struct, frozen=True, kw_only=True):
    """A batch ready for the learner; key on the wire is ``batch_id``.

    ``masked`` lists, in manifest order, every sample left out of the group
    statistics: the ``missing`` ones and those judged ``sandbox_error``. The
    advantages were computed with ``advantage_norm_by_std`` and
    ``advantage_epsilon`` (verl's ``norm_adv_by_std_in_grpo`` and ``epsilon``), so a
    learner that drops more samples can recompute them the same way.
    """

    batch_id: str
    samples: list[ScoredSample]
    groups: dict[str, GroupStats] = {}
    missing: list[str] = []
    complete: bool = True
    policy_version: int = 0
    duplicates_ignored: int = 0
    masked: list[str] = []
    advantage_norm_by_std: bool = True
    advantage_epsilon: float = 1e-6
    created_at: float = msgspec.field(default_factory=_now)
    schema_version: int = SCHEMA_VERSION


class ProblemRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A shared test suite on the compacted problems topic; key is ``problem_id``."""

    problem_id: str
    digest: str
    tests: TestSuite
    schema_version: int = SCHEMA_VERSION


# Where a record was given up on: decoded (worker, aggregator), validated (aggregator),
# judged, its reward emitted, or refused unjudged (it killed worker after worker).
DeadLetterStage = Literal["decode", "validate", "execute", "emit", "quarantine"]
DEAD_LETTER_STAGES: tuple[DeadLetterStage, ...] = get_args(DeadLetterStage)
# Why: a decode or validation error, a check of the worker's own, or (stage "execute"
# and "emit") the sandbox-side error's class (sandbox_workers.errors has the tree).
DeadLetterErrorType = Literal[
    "SchemaError",
    "InvalidMessageError",
    "InvalidReplyTopic",
    "CompletionTooLarge",
    "Quarantined",
    "SandboxWorkerError",
    "SandboxFault",
    "ZygoteFault",
    "IsolationUnavailable",
    "BuildError",
    "ExecutorError",
    "InvalidCompletion",
    "ProblemError",
    "ProblemNotFound",
    "DigestMismatch",
    "ProblemTableBehind",
    "RewardUndeliverable",
]
DEAD_LETTER_ERROR_TYPES: tuple[DeadLetterErrorType, ...] = get_args(DeadLetterErrorType)


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """Anything that could not be decoded or processed, with the reason."""

    source_topic: str
    partition: int
    offset: int
    reason: str
    error_type: DeadLetterErrorType
    stage: DeadLetterStage
    key: bytes | None = None
    value: bytes = b""
    service: str = ""
    failed_at: float = msgspec.field(default_factory=_now)
    schema_version: int = SCHEMA_VERSION
