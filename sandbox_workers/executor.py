"""The executor: judges one completion against its tests, in the sandbox.

Stages, each a small step of :meth:`Executor.run`::

    suite -> extract code -> static check -> compile (cached) -> run tests -> classify -> score

Everything the *program* does (not compiling, crashing, hanging, allocating,
printing too much, answering wrongly) ends as a verdict in the returned
:class:`~schemas.RewardEvent`. Exceptions are for the rest:

- :class:`InvalidCompletion` — the completion cannot be judged at all (no
  tests, unknown language, malformed suite). Not retriable: the worker sends it
  to the dead-letter topic.
- :class:`~sandbox_workers.sandbox.SandboxFault` never escapes: it is retried
  up to ``max_attempts`` times, then reported as verdict ``sandbox_error``
  (never as a wrong answer).
"""

from __future__ import annotations

import json
import logging
import platform
import secrets
import tempfile
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from shutil import rmtree
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from sandbox_workers.compile_cache import CompileCache
from sandbox_workers.errors import SandboxWorkerError
from sandbox_workers.extract import program_of
from sandbox_workers.judging.classify import tail_text
from sandbox_workers.judging.harness import HarnessPlan, TestCodeCache, harness_languages
from sandbox_workers.judging.program import Builder, CompileFailure, Program
from sandbox_workers.judging.runner import SuiteRun, SuiteRunner, checker_judge, output_judge
from sandbox_workers.judging.scoring import score_tests
from sandbox_workers.languages import Language, Toolchain, discover_toolchains, lookup
from sandbox_workers.languages.python import check_program
from sandbox_workers.sandbox import DEFAULT_BACKSTOP, Sandbox, SandboxFault, WallBackstop
from schemas import (
    AssertSuite,
    CheckerSuite,
    Completion,
    IoSuite,
    Limits,
    RewardEvent,
    TestOutcome,
    TestSuite,
    Verdict,
)

__all__ = ["Executor", "ExecutorConfig", "ExecutorError", "InvalidCompletion"]

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)
_MARKER_CHARS = 32


class ExecutorError(SandboxWorkerError):
    """The executor's errors (a :class:`~sandbox_workers.errors.SandboxWorkerError`)."""


class InvalidCompletion(ExecutorError):
    """The completion cannot be judged (no tests, unknown language, malformed suite).

    Not retriable: the same message will fail the same way on any worker.
    """


@dataclass(frozen=True)
class ExecutorConfig:
    """How the executor judges; the sandbox itself is configured separately.

    ``compile_cache_dir`` keeps compiled artifacts (and Go's build cache) across
    restarts; without it they live in memory and a private temporary directory.
    ``toolchains`` skips discovery (tests share one discovery across executors).
    ``backstop`` is the wall-clock backstop of every time limit (tests, the
    harness's per-test limits, compiles, the total budget), which are CPU time.
    ``test_code_cache_bytes`` bounds the Python assert suites kept compiled
    (:class:`~sandbox_workers.judging.harness.TestCodeCache`); 0 compiles each
    suite's tests in the sandbox at every execution.
    """

    worker_id: str = ""
    max_attempts: int = 2
    output_tail_bytes: int = 2048
    message_bytes: int = 4096
    compile_cache_dir: Path | None = None
    compile_cache_bytes: int = 256 << 20
    toolchains: Mapping[str, Toolchain] | None = None
    backstop: WallBackstop = DEFAULT_BACKSTOP
    test_code_cache_bytes: int = 32 << 20


@dataclass(frozen=True)
class _Task:
    """One completion to judge, once its language and code are known."""

    language: Language
    toolchain: Toolchain
    source: str
    suite: TestSuite
    limits: Limits


@dataclass
class _Judgement:
    """What judging produced before scoring: a whole-program verdict, or per-test outcomes."""

    verdict: Verdict | None = None
    message: str = ""
    run: SuiteRun = field(default_factory=SuiteRun)


class Executor:
    """Judges completions: code extraction, compilation, test execution, scoring."""

    def __init__(self, config: ExecutorConfig, sandbox: Sandbox) -> None:
        self._config = config
        self._sandbox = sandbox
        state_dir = self._state_dir(config)
        if config.toolchains is not None:
            self._toolchains = dict(config.toolchains)
        else:
            self._toolchains = discover_toolchains(state_dir)
        artifacts = config.compile_cache_dir / "artifacts" if config.compile_cache_dir else None
        self._cache = CompileCache(artifacts, config.compile_cache_bytes)
        self._builder = Builder(
            sandbox, self._cache, message_bytes=config.message_bytes, backstop=config.backstop
        )
        self._end_marker = _end_marker(state_dir)
        self._test_code = (
            TestCodeCache(config.test_code_cache_bytes) if config.test_code_cache_bytes else None
        )

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox every execution runs in (the worker's tool sessions share it)."""
        return self._sandbox

    async def aclose(self) -> None:
        """Release the sandbox (its warm zygotes and cgroups); no execution may be running."""
        await self._sandbox.aclose()

    def _state_dir(self, config: ExecutorConfig) -> Path:
        if config.compile_cache_dir is not None:
            config.compile_cache_dir.mkdir(parents=True, exist_ok=True)
            return config.compile_cache_dir
        private = Path(tempfile.mkdtemp(prefix="rewardbus-executor-"))
        weakref.finalize(self, rmtree, private, ignore_errors=True)
        return private

    @property
    def languages(self) -> dict[str, str]:
        """Languages this host can judge, with their toolchain versions."""
        return {name: toolchain.version for name, toolchain in self._toolchains.items()}

    @property
    def compile_cache(self) -> CompileCache:
        """The compiled-artifact cache (its ``stats`` feed metrics)."""
        return self._cache

    async def run(
        self,
        completion: Completion,
        suite: TestSuite | None = None,
        *,
        output_tail_bytes: int | None = None,
    ) -> RewardEvent:
        """Judge ``completion`` against ``suite`` (default: ``completion.tests``).

        The event keeps the last ``output_tail_bytes`` of the kept stdout and stderr
        (None: ``ExecutorConfig.output_tail_bytes``; a tool call asks for its whole
        output cap). Never raises for anything the program does. Raises
        :class:`InvalidCompletion` when the completion cannot be judged at all.
        """
        started = time.monotonic()
        tests = suite if suite is not None else completion.tests
        if tests is None:
            raise InvalidCompletion("completion has no tests (neither inline nor resolved)")
        language, toolchain = self._language(completion.language)
        total = _validate(tests, language)
        with _tracer.start_as_current_span("execute") as span:
            span.set_attribute("rewardbus.sample_id", completion.sample_id)
            span.set_attribute("rewardbus.language", language.name)
            with _tracer.start_as_current_span("parse") as parse:
                source = program_of(completion, language.name)
                parse.set_attribute("rewardbus.code.chars", len(source or ""))
                if source is None:
                    parse.set_status(Status(StatusCode.ERROR, "no code found"))
            if source is None:
                judgement = _Judgement(Verdict.NO_CODE, "no code found in the completion")
                attempt = 1
            else:
                task = _Task(language, toolchain, source, tests, completion.limits)
                judgement, attempt = await self._judge_with_retries(task)
            tail = output_tail_bytes or self._config.output_tail_bytes
            event = self._event(
                completion, tests, total, judgement, attempt=attempt, started=started, tail=tail
            )
            span.set_attribute("rewardbus.verdict", event.verdict.value)
            span.set_attribute("rewardbus.score", event.score)
        return event

    def _language(self, name: str) -> tuple[Language, Toolchain]:
        language = lookup(name)
        if language is None:
            raise InvalidCompletion(f"unsupported language {name!r}")
        toolchain = self._toolchains.get(language.name)
        if toolchain is None:
            raise InvalidCompletion(f"no {language.name} toolchain on this worker")
        return language, toolchain

    async def _judge_with_retries(self, task: _Task) -> tuple[_Judgement, int]:
        fault: SandboxFault | None = None
        attempts = max(self._config.max_attempts, 1)
        attempt = 1
        for attempt in range(1, attempts + 1):
            try:
                return await self._judge(task), attempt
            except SandboxFault as exc:
                fault = exc
                log.warning("sandbox fault (attempt %d/%d): %s", attempt, attempts, exc)
                if not exc.retriable:
                    # The host lacks something (a layer, the launcher): no retry helps.
                    break
        message = f"sandbox failed after {attempt} attempt(s): {fault}"
        return _Judgement(Verdict.SANDBOX_ERROR, message[: self._config.message_bytes]), attempt

    async def _judge(self, task: _Task) -> _Judgement:
        suite, limits = task.suite, task.limits
        checked = None
        if task.language.name == "python" and _same_python(task.toolchain):
            with _tracer.start_as_current_span("static check") as check:
                checked = check_program(task.source)
                if checked.error is not None:
                    check.set_status(Status(StatusCode.ERROR, checked.error[:200]))
            if checked.error is not None:
                message = checked.error[: self._config.message_bytes]
                return _Judgement(Verdict.COMPILE_ERROR, message)
        runner = SuiteRunner(
            self._sandbox,
            limits,
            stop_on_first_failure=suite.stop_on_first_failure,
            backstop=self._config.backstop,
        )
        if isinstance(suite, AssertSuite) and task.language.name not in harness_languages():
            return await self._program_per_case(runner, task, suite)
        program = await self._builder.build(task.language, task.toolchain, task.source, limits)
        if isinstance(program, CompileFailure):
            return _Judgement(Verdict.COMPILE_ERROR, program.message)
        if checked is not None and checked.code is not None and program.source == task.source:
            program = replace(program, code=checked.code)
        if isinstance(suite, IoSuite):
            return _Judgement(run=await self._io(runner, program, suite, limits))
        if isinstance(suite, AssertSuite):
            tests: list[str | None] = list(suite.cases) if suite.cases else [None]
            compiled = None
            python = task.language.name == "python" and _same_python(task.toolchain)
            if self._test_code is not None and python:
                protect = suite.entry_point is not None
                compiled = self._test_code.get(suite.code, tests, protect_builtins=protect)
            plan = HarnessPlan(
                language=task.language.name,
                mode="assert",
                tests=tests,
                time_s=limits.time_s,
                memory_mb=limits.memory_mb,
                setup=suite.code,
                entry_point=suite.entry_point,
                compiled=compiled,
            )
            return _Judgement(run=await runner.harness_tests(program, plan, None, None))
        return _Judgement(run=await self._checked(runner, program, suite, limits))

    async def _io(
        self, runner: SuiteRunner, program: Program, suite: IoSuite, limits: Limits
    ) -> SuiteRun:
        tolerance = suite.float_tolerance if suite.compare == "float" else None
        if suite.fn_name is not None:
            plan = HarnessPlan(
                language=program.language.name,
                mode="call",
                tests=list(suite.inputs),
                time_s=limits.time_s,
                memory_mb=limits.memory_mb,
                fn_name=suite.fn_name,
            )
            return await runner.harness_tests(program, plan, suite.outputs, tolerance)
        cases = [
            (_as_text(i), _as_text(o)) for i, o in zip(suite.inputs, suite.outputs, strict=True)
        ]
        judge = output_judge(program, suite.compare, suite.float_tolerance)
        return await runner.stdin_tests(program, cases, judge)

    async def _checked(
        self, runner: SuiteRunner, program: Program, suite: CheckerSuite, limits: Limits
    ) -> SuiteRun:
        checker_language, checker_toolchain = self._language(suite.checker.language)
        checker = await self._builder.build(
            checker_language, checker_toolchain, suite.checker.code, Limits()
        )
        judge = checker_judge(self._sandbox, checker, limits, self._config.backstop)
        cases = list(zip(suite.inputs, suite.outputs, strict=True))
        return await runner.stdin_tests(program, cases, judge)

    async def _program_per_case(
        self, runner: SuiteRunner, task: _Task, suite: AssertSuite
    ) -> _Judgement:
        # MultiPL-E style: the test code (with its own main) follows the program.
        language = task.language
        tests = [f"{language.test_prelude}{suite.code}\n{case}\n" for case in suite.cases or [""]]
        marked = [language.mark_tests_end(text, self._end_marker) for text in tests]
        # One suite, one test code shape: marked all (the marker is expected) or none.
        end_marker = self._end_marker if all(m is not None for m in marked) else None
        if end_marker is not None:
            tests = [m for m in marked if m is not None]
        sources = [f"{task.source}\n{text}" for text in tests]

        def builder(text: str) -> Callable[[], Awaitable[Program | CompileFailure]]:
            return lambda: self._builder.build(
                language, task.toolchain, text, task.limits, extra_args=language.test_compile_args
            )

        if len(sources) == 1:
            program = await builder(sources[0])()
            if isinstance(program, CompileFailure):
                return _Judgement(Verdict.COMPILE_ERROR, program.message)
            return _Judgement(run=await runner.program_tests([program], end_marker=end_marker))
        return _Judgement(
            run=await runner.program_tests(
                [builder(text) for text in sources], end_marker=end_marker
            )
        )

    def _event(
        self,
        completion: Completion,
        suite: TestSuite,
        total: int,
        judgement: _Judgement,
        *,
        attempt: int,
        started: float,
        tail: int,
    ) -> RewardEvent:
        outcomes: list[TestOutcome] = judgement.run.outcomes
        if judgement.verdict is not None:
            score, verdict, passed = 0.0, judgement.verdict, 0
        else:
            scored = score_tests(outcomes, total, all_or_nothing=suite.all_or_nothing)
            score, verdict, passed = scored.score, scored.verdict, scored.passed
        # Without a whole-program message (compiler output...), the first failing
        # test's reason says what went wrong.
        message = judgement.message or next(
            (o.message for o in outcomes if o.verdict is not Verdict.ACCEPTED), ""
        )
        return RewardEvent(
            sample_id=completion.sample_id,
            batch_id=completion.batch_id,
            group_id=completion.group_id,
            policy_version=completion.policy_version,
            score=score,
            verdict=verdict,
            passed=passed,
            total=total,
            tests=outcomes,
            stdout_tail=tail_text(judgement.run.stdout, tail),
            stderr_tail=tail_text(judgement.run.stderr, tail),
            message=message[: self._config.message_bytes],
            exec_ms=round((time.monotonic() - started) * 1000, 3),
            worker_id=self._config.worker_id,
            attempt=attempt,
            degraded=list(self._sandbox.degraded),
        )


def _validate(suite: TestSuite, language: Language) -> int:
    """The number of tests, or :class:`InvalidCompletion` for a suite that cannot run."""
    if isinstance(suite, IoSuite):
        count = _validate_io(suite, language)
    elif isinstance(suite, AssertSuite):
        count = _validate_assert(suite, language)
    else:
        _same_length("checker", suite.inputs, suite.outputs)
        checker = lookup(suite.checker.language)
        if checker is None or checker.output_kind == "rows":
            raise InvalidCompletion(f"unsupported checker language {suite.checker.language!r}")
        count = len(suite.inputs)
    if count == 0:
        raise InvalidCompletion("test suite is empty")
    return count


def _validate_io(suite: IoSuite, language: Language) -> int:
    _same_length("io", suite.inputs, suite.outputs)
    if suite.fn_name is not None:
        if language.name not in harness_languages():
            raise InvalidCompletion(f"function-call tests are not supported for {language.name}")
        if not suite.fn_name.isidentifier():
            raise InvalidCompletion(f"fn_name {suite.fn_name!r} is not an identifier")
    return len(suite.inputs)


def _validate_assert(suite: AssertSuite, language: Language) -> int:
    if language.output_kind == "rows":
        raise InvalidCompletion(f"assert suites are not supported for {language.name}")
    if not suite.code.strip() and not suite.cases:
        raise InvalidCompletion("assert suite has neither test code nor cases")
    if suite.entry_point is not None and not suite.entry_point.isidentifier():
        raise InvalidCompletion(f"entry_point {suite.entry_point!r} is not an identifier")
    return len(suite.cases) or 1


def _same_length(kind: str, inputs: list[Any], outputs: list[Any]) -> None:
    if len(inputs) != len(outputs):
        raise InvalidCompletion(f"{kind} suite has {len(inputs)} inputs but {len(outputs)} outputs")


def _end_marker(state_dir: Path) -> str:
    """This worker's secret end-of-tests marker (``Language.mark_tests_end``).

    Secret, so a program cannot print it and exit; kept in the state directory, so
    programs compiled with it stay cached across restarts. Two workers racing to
    create it only cost each other cache misses: the marker is part of the source.
    """
    path = state_dir / "tests-end-marker"
    try:
        marker = path.read_text(encoding="ascii").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        marker = ""
    if len(marker) != _MARKER_CHARS:
        marker = secrets.token_hex(_MARKER_CHARS // 2)
        staged = path.with_name(f"{path.name}.{secrets.token_hex(4)}")
        staged.touch(mode=0o600)
        staged.write_text(marker, encoding="ascii")
        staged.replace(path)
    return marker


def _same_python(toolchain: Toolchain) -> bool:
    # The worker's compile() must parse the same grammar as the sandbox's Python.
    major_minor = ".".join(platform.python_version_tuple()[:2])
    return toolchain.version.startswith(f"cpython-{major_minor}.")


def _as_text(value: Any) -> str:
    """A stdin/stdout test value as text (datasets sometimes store lists of lines)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_as_text(item) for item in value)
    return json.dumps(value)
