"""Running a suite's tests against a prepared program.

Three shapes:

- :meth:`SuiteRunner.stdin_tests` — one execution per test, input on stdin,
  output compared as text or rows, or judged by a checker program; where the
  sandbox serves sessions, the suite's executions are runs of one session;
- :meth:`SuiteRunner.harness_tests` — every test of a function-call or assert
  suite in one execution of the language's harness, one record per test;
- :meth:`SuiteRunner.program_tests` — assert suites in languages without a
  harness: each case is its own program (source + test code), passing when it
  exits cleanly.

Outcomes of the program are verdicts; only :class:`SandboxFault` escapes.

Every limit is CPU time with a wall-clock backstop (:class:`WallBackstop`): the
per-test limit, the harness's own limits per test, and the completion's total
budget, so a verdict does not depend on how busy the host is.
"""

from __future__ import annotations

import binascii
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from sandbox_workers.judging.checker import (
    ANSWER_FILE,
    INPUT_FILE,
    OUTPUT_FILE,
    interpret_checker,
)
from sandbox_workers.judging.classify import describe_exit, failure_verdict
from sandbox_workers.judging.compare import (
    Compare,
    call_result_matches,
    rows_match,
    text_matches,
)
from sandbox_workers.judging.harness import (
    HarnessPlan,
    markers_stdin,
    new_markers,
    parse_records,
    stdin_harness_languages,
    strip_markers,
)
from sandbox_workers.judging.program import CompileFailure, Program
from sandbox_workers.judging.protocol import STDERR_TAIL_BYTES, HarnessRecord
from sandbox_workers.judging.scoring import Budget
from sandbox_workers.languages import utf8
from sandbox_workers.languages.native import EXIT_CALLED_STATUS
from sandbox_workers.sandbox import (
    DEFAULT_BACKSTOP,
    ExecRequest,
    ExecResult,
    Sandbox,
    SessionSandbox,
    WallBackstop,
)
from schemas import Limits, TestOutcome, Verdict

__all__ = [
    "Judged",
    "OutputJudge",
    "ProgramTest",
    "SuiteRun",
    "SuiteRunner",
    "checker_judge",
    "output_judge",
]

_tracer = trace.get_tracer(__name__)

# Interpreter start-up and harness bookkeeping on top of the tests' own time.
_HARNESS_STARTUP_S = 2.0
_HARNESS_MEMORY_MB = 64
# The same for a suite's only test, which the harness runs in its own process
# (HarnessPlan.alone): the jail ends a test that runs on at its limit and this
# much more, ~4x a cold harness's start (~25 ms of CPU; a warm one's is ~1 ms).
_ALONE_STARTUP_S = 0.1
_RECORD_BYTES = 512
# A harness's stdin tests: chunks of 8, 32, then 128 tests per execution.
_FIRST_CHUNK = 8
_CHUNK_GROWTH = 4
_MAX_CHUNK = 128
_NOT_RUN = "not run: total time limit reached"
_CALL_PASSES_BY_VALUE = "a function-call test passes only by the value it returns"
_CHECKER_TIME_S = 10.0
_CHECKER_MEMORY_MB = 512
_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)
_ASSERTION = re.compile(rb"[Aa]ssert")


@dataclass(frozen=True)
class Judged:
    """One test's judgement of the program's output."""

    verdict: Verdict
    score: float = 0.0
    message: str = ""


# (test index, test input, expected output, program stdout) -> judgement
OutputJudge = Callable[[int, str, str, bytes], Awaitable[Judged]]


@dataclass(frozen=True)
class _HarnessRun:
    """One harness execution: its result, each test's record, the program's own output."""

    result: ExecResult
    records: list[HarnessRecord | None]
    output: bytes
    span: trace.Span
    times_ns: tuple[int, int]

    def spans(self, outcomes: Sequence[TestOutcome]) -> None:
        """A span per test, placed inside the execution's by the harness's timings."""
        _harness_test_spans(self.span, outcomes, *self.times_ns)


@dataclass(frozen=True)
class _ChunkRun:
    """The judged tests of one chunk; ``kept``: the execution whose output to keep."""

    outcomes: list[TestOutcome]
    kept: ExecResult
    failed: bool
    stopped: bool


# Runs one execution: the sandbox's execute, or a session's run.
Execute = Callable[[ExecRequest], Awaitable[ExecResult]]
# A whole-program test: ready, or built on demand (compiled only if reached).
ProgramTest = Program | CompileFailure | Callable[[], Awaitable[Program | CompileFailure]]


@dataclass
class SuiteRun:
    """Per-test outcomes and the output worth reporting."""

    outcomes: list[TestOutcome] = field(default_factory=list)
    stdout: bytes = b""
    stderr: bytes = b""
    # Set once a failing execution's output has been kept.
    failure_kept: bool = False

    def keep_output(self, result: ExecResult, *, failed: bool, stdout: bytes | None = None) -> None:
        """Keep the first failing execution's output (else the latest one's)."""
        if self.failure_kept:
            return
        self.stdout = result.stdout if stdout is None else stdout
        self.stderr = result.stderr
        self.failure_kept = failed


def output_judge(program: Program, compare: Compare, tolerance: float) -> OutputJudge:
    """Compare stdout with the expected output (text, or rows for SQL)."""
    rows = program.language.output_kind == "rows"
    ordered = bool(_ORDER_BY.search(program.source))

    async def judge(index: int, test_input: str, expected: str, stdout: bytes) -> Judged:
        del index, test_input
        actual = stdout.decode("utf-8", errors="replace")
        if rows:
            same = rows_match(actual, expected, ordered=ordered, mode=compare, tolerance=tolerance)
        else:
            same = text_matches(actual, expected, compare, tolerance)
        if same:
            return Judged(Verdict.ACCEPTED, 1.0)
        return Judged(Verdict.WRONG_ANSWER, 0.0, _difference(actual, expected))

    return judge


def checker_judge(
    sandbox: Sandbox,
    checker: Program | CompileFailure,
    limits: Limits,
    backstop: WallBackstop = DEFAULT_BACKSTOP,
) -> OutputJudge:
    """Let a checker program judge stdout (testlib protocol, see :mod:`.checker`)."""

    async def judge(index: int, test_input: str, expected: str, stdout: bytes) -> Judged:
        del index
        if isinstance(checker, CompileFailure):
            return Judged(
                Verdict.SANDBOX_ERROR, 0.0, f"checker does not compile: {checker.message}"[:300]
            )
        checker_limits = Limits(
            time_s=_CHECKER_TIME_S,
            memory_mb=max(limits.memory_mb, _CHECKER_MEMORY_MB),
            output_kb=64,
        )
        request = checker.request(
            checker_limits,
            time_s=_CHECKER_TIME_S,
            wall_s=backstop.wall_s(_CHECKER_TIME_S),
            wall_cap_s=backstop.cap_s(_CHECKER_TIME_S),
            files={
                INPUT_FILE: utf8(test_input),
                OUTPUT_FILE: stdout,
                ANSWER_FILE: utf8(expected),
            },
            args=(INPUT_FILE, OUTPUT_FILE, ANSWER_FILE),
        )
        result = await sandbox.execute(request)
        said = interpret_checker(result)
        return Judged(said.verdict, said.score, said.message)

    return judge


class SuiteRunner:
    """Runs one completion's tests; holds its limits and time budget."""

    def __init__(
        self,
        sandbox: Sandbox,
        limits: Limits,
        *,
        stop_on_first_failure: bool,
        backstop: WallBackstop = DEFAULT_BACKSTOP,
    ) -> None:
        self._sandbox = sandbox
        self._limits = limits
        self._backstop = backstop
        self._budget = Budget(limits.total_time_s)
        self._stop = stop_on_first_failure

    def _test_request(
        self, program: Program, stdin: bytes = b"", files: Mapping[str, bytes] | None = None
    ) -> ExecRequest:
        """The next single-execution test: its CPU limit, backstop and cap."""
        time_s = min(self._limits.time_s, self._budget.left_s)
        return program.request(
            self._limits,
            time_s=time_s,
            wall_s=self._backstop.wall_s(time_s),
            wall_cap_s=self._backstop.cap_s(time_s),
            stdin=stdin,
            files=files,
        )

    async def stdin_tests(
        self, program: Program, cases: Sequence[tuple[str, str]], judge: OutputJudge
    ) -> SuiteRun:
        """One execution per (input, expected) case, or runs of the language's harness.

        A single case runs as an execution of its own, the program as its main: the
        jail already is what the harness rebuilds per test (limits, streams, a fresh
        process, the record), and the harness's fork of the interpreter for its one
        test nearly doubled the execution's CPU and wall time (a trivial program,
        ``benchmarks/bench_pipeline.py --phases trivial``: docs/performance.md)."""
        if program.language.name in stdin_harness_languages() and len(cases) > 1:
            _, files = program.language.test_io(program.source, cases[0][0])
            if not files:
                return await self._stdin_harness_tests(program, cases, judge)
        run = SuiteRun()
        async with self._executions(program, cases) as execute:
            for index, (test_input, expected) in enumerate(cases):
                if self._budget.exhausted:
                    run.outcomes.extend(_not_run(range(index, len(cases)), _NOT_RUN))
                    break
                outcome = await self._stdin_test(
                    program, index, (test_input, expected), execute, judge=judge, run=run
                )
                run.outcomes.append(outcome)
                if self._stop and outcome.verdict is not Verdict.ACCEPTED:
                    break
        return run

    @contextlib.asynccontextmanager
    async def _executions(
        self, program: Program, cases: Sequence[tuple[str, str]]
    ) -> AsyncIterator[Execute]:
        """How the suite's tests are executed: runs of one session where the sandbox serves
        them (every test's request is the same but for stdin), else one execution each."""
        session = None
        if len(cases) > 1 and isinstance(self._sandbox, SessionSandbox):
            stdin, files = program.language.test_io(program.source, cases[0][0])
            if not files:
                session = self._sandbox.session(self._test_request(program, stdin))
        if session is None:
            yield self._sandbox.execute
            return
        try:
            yield session.run
        finally:
            await session.aclose()

    async def _stdin_test(
        self,
        program: Program,
        index: int,
        case: tuple[str, str],
        execute: Execute,
        *,
        judge: OutputJudge,
        run: SuiteRun,
    ) -> TestOutcome:
        stdin, files = program.language.test_io(program.source, case[0])
        request = self._test_request(program, stdin, files)
        with _tracer.start_as_current_span("test") as span:
            span.set_attribute("rewardbus.test.index", index)
            result = await execute(request)
            judged = await self._judge_run(result, index, case, judge)
            _mark_test(span, judged.verdict, judged.message)
        run.keep_output(result, failed=judged.verdict is not Verdict.ACCEPTED)
        return _outcome(index, judged, result)

    async def _judge_run(
        self, result: ExecResult, index: int, case: tuple[str, str], judge: OutputJudge
    ) -> Judged:
        """One stdin test's run: its time charged, then its failure, or its output judged."""
        self._budget.spend(result.cpu_ms, result.wall_ms, result.waited_ms)
        failed = failure_verdict(result)
        if failed is not None:
            return Judged(failed, 0.0, describe_exit(result))
        test_input, expected = case
        return await judge(index, test_input, expected, result.stdout)

    async def harness_tests(
        self,
        program: Program,
        plan: HarnessPlan,
        expected: Sequence[Any] | None,
        tolerance: float | None,
    ) -> SuiteRun:
        """All tests in one harness execution; call results compared with ``expected``."""
        ran = await self._harness(program, plan, len(plan.tests) * _RECORD_BYTES)
        self._budget.spend(ran.result.cpu_ms, ran.result.wall_ms, ran.result.waited_ms)
        run = SuiteRun()
        missing: Judged | None = None
        for index, record in enumerate(ran.records):
            timing: ExecResult | HarnessRecord | None
            if record is None:
                missing = missing or _missing(ran.result)
                # A test run alone (HarnessPlan.alone) is all the execution ran.
                judged, timing = missing, (ran.result if plan.alone else None)
                missing = Judged(missing.verdict, 0.0, "not run: the execution ended")
            else:
                judged = _judge_record(record, expected, index, tolerance)
                timing = record
            run.outcomes.append(_outcome(index, judged, timing))
            if self._stop and judged.verdict is not Verdict.ACCEPTED:
                break
        failed = any(o.verdict is not Verdict.ACCEPTED for o in run.outcomes)
        run.keep_output(ran.result, failed=failed, stdout=ran.output)
        ran.spans(run.outcomes)
        return run

    async def _stdin_harness_tests(
        self, program: Program, cases: Sequence[tuple[str, str]], judge: OutputJudge
    ) -> SuiteRun:
        """Stdin tests run by the language's harness, a fork per test, in executions of
        growing chunks of tests: a program that fails early (and a suite that stops on
        its first failure) runs few tests past it; the outputs of one chunk, all held
        at once, stay bounded."""
        run = SuiteRun()
        cap = self._limits.output_kb * 1024
        # A record carries the test's stdout and its stderr's tail, base64.
        per_test = _RECORD_BYTES + (cap + STDERR_TAIL_BYTES) * 4 // 3 + 8
        start, size = 0, _FIRST_CHUNK
        while start < len(cases):
            if self._budget.exhausted:
                run.outcomes.extend(_not_run(range(start, len(cases)), _NOT_RUN))
                break
            chunk = cases[start : start + size]
            plan = HarnessPlan(
                language=program.language.name,
                mode="stdin",
                tests=[test_input for test_input, _ in chunk],
                time_s=self._limits.time_s,
                memory_mb=self._limits.memory_mb,
                output_bytes=cap,
            )
            ran = await self._harness(program, plan, len(chunk) * per_test)
            chunk_run = await self._judge_stdin_records(ran, start, chunk, judge)
            run.outcomes.extend(chunk_run.outcomes)
            run.keep_output(chunk_run.kept, failed=chunk_run.failed)
            ran.spans(chunk_run.outcomes)
            if chunk_run.stopped:
                break
            start += len(chunk)
            size = min(size * _CHUNK_GROWTH, _MAX_CHUNK)
        return run

    async def _judge_stdin_records(
        self, ran: _HarnessRun, start: int, chunk: Sequence[tuple[str, str]], judge: OutputJudge
    ) -> _ChunkRun:
        """Each test of a chunk judged from its record. ``kept``: the first failing test's
        result (the whole execution's when its record is missing), else the last one's."""
        whole = replace(ran.result, stdout=ran.output)
        outcomes: list[TestOutcome] = []
        first_failure: ExecResult | None = None
        last = whole
        missing: Judged | None = None
        for offset, (test_input, expected) in enumerate(chunk):
            index = start + offset
            record = ran.records[offset]
            result: ExecResult | None = None
            if record is None:
                # The execution ended during this test; the rest of the chunk never ran.
                judged = missing or _missing(ran.result)
                missing = Judged(judged.verdict, 0.0, "not run: the execution ended")
            elif record.verdict != "exited":
                judged = _judge_record(record, None, index, None)  # not run: no time left
            else:
                result = last = _stdin_result(record, ran.result.cpu_source)
                # Charged per test as a jail of its own would be (not the harness's start).
                judged = await self._judge_run(result, index, (test_input, expected), judge)
            outcomes.append(_outcome(index, judged, result if result is not None else record))
            if judged.verdict is not Verdict.ACCEPTED:
                first_failure = first_failure or result or whole
                if self._stop:
                    return _ChunkRun(outcomes, first_failure, failed=True, stopped=True)
        failed = first_failure is not None
        return _ChunkRun(outcomes, first_failure or last, failed=failed, stopped=False)

    async def _harness(self, program: Program, plan: HarnessPlan, slack_bytes: int) -> _HarnessRun:
        """One execution of the language's harness running ``plan``'s tests."""
        count = len(plan.tests)
        markers = new_markers(count)
        budget_s = self._budget.left_s
        # The per-test limits are the harness's; this only backs them up. A test
        # may run twice (the JavaScript harness re-runs one it timed out by the
        # clock only, see jsharness) and overdraw the budget by one test.
        if plan.alone:
            # Run in the harness's own process: the jail's limits are the test's, and
            # the harness's start (a cold interpreter's included) on top.
            time_s = min(plan.time_s, budget_s) + _ALONE_STARTUP_S
            wall_s = self._backstop.wall_s(time_s)
        else:
            time_s = min(2 * count * plan.time_s, budget_s + plan.time_s) + _HARNESS_STARTUP_S
            wall_s = _harness_wall_s(self._backstop, count, plan.time_s, budget_s)
        request = program.request(
            self._limits,
            time_s=time_s,
            wall_s=wall_s,
            wall_cap_s=self._backstop.stretch * wall_s,
            stdin=markers_stdin(markers),
            files=plan.files(
                program.source,
                budget_s=budget_s,
                stop_on_failure=self._stop,
                backstop=self._backstop,
                code=program.code,
            ),
            entry=plan.entry,
            memory_slack_mb=_HARNESS_MEMORY_MB,
            output_slack_bytes=slack_bytes,
        )
        with _tracer.start_as_current_span("tests") as span:
            span.set_attribute("rewardbus.test.count", count)
            started_ns = time.time_ns()
            result = await self._sandbox.execute(request)
            ended_ns = time.time_ns()
        records = parse_records(result.stdout, markers)
        output = strip_markers(result.stdout, markers)
        return _HarnessRun(result, records, output, span, (started_ns, ended_ns))

    async def program_tests(
        self, programs: Sequence[ProgramTest], *, end_marker: str | None = None
    ) -> SuiteRun:
        """Each test is a whole program that passes by exiting cleanly.

        Items may be callables that build the program on demand, so a stopped or
        out-of-time suite does not compile the rest. With ``end_marker``, a test
        passes only when its stderr ends with it too (see ``Language.mark_tests_end``).
        """
        run = SuiteRun()
        for index, item in enumerate(programs):
            if self._budget.exhausted:
                run.outcomes.extend(_not_run(range(index, len(programs)), _NOT_RUN))
                break
            program = item if isinstance(item, (Program, CompileFailure)) else await item()
            if isinstance(program, CompileFailure):
                judged = Judged(Verdict.COMPILE_ERROR, 0.0, program.message[:300])
                run.outcomes.append(_outcome(index, judged, None))
            else:
                run.outcomes.append(await self._program_test(program, index, run, end_marker))
            if self._stop and run.outcomes[-1].verdict is not Verdict.ACCEPTED:
                break
        return run

    async def _program_test(
        self, program: Program, index: int, run: SuiteRun, end_marker: str | None
    ) -> TestOutcome:
        request = self._test_request(program)
        with _tracer.start_as_current_span("test") as span:
            span.set_attribute("rewardbus.test.index", index)
            result = await self._sandbox.execute(request)
            if end_marker is not None:
                result = _without_end_marker(result, end_marker)
            judged = _program_verdict(result)
            _mark_test(span, judged.verdict, judged.message)
        self._budget.spend(result.cpu_ms, result.wall_ms, result.waited_ms)
        run.keep_output(result, failed=judged.verdict is not Verdict.ACCEPTED)
        return _outcome(index, judged, result)


def _harness_wall_s(backstop: WallBackstop, count: int, test_s: float, budget_s: float) -> float:
    """The wall backstop of one harness execution running ``count`` tests.

    The harness ends each test at its own backstop and stops once the budget
    is spent (charged as :class:`Budget` is: wall time not spent waiting for
    a CPU at most), so the tests take at most the smaller of ``count``
    backstops and the budget plus the one test that overdraws it; ``factor``
    times the budget leaves room for the waits of finished tests, which the
    jail no longer sees. Start-up gets a backstop of its own. A test may first
    run to its CPU limit by the clock (see jsharness).
    """
    per_test = test_s + backstop.wall_s(test_s)
    tests = min(count * per_test, backstop.factor * budget_s + per_test)
    return backstop.wall_s(_HARNESS_STARTUP_S) + tests


def _without_end_marker(result: ExecResult, marker: str) -> ExecResult:
    """The result with the marker cut out of its stderr; not ``ok`` if the marker was missing.

    The marker is a worker secret: it never reaches a RewardEvent's stderr tail.
    """
    # Anywhere, not only last: the program's own destructors or threads may write after
    # it, and a program cannot print it (it does not know it).
    needle = utf8(marker)
    stderr = result.stderr.replace(needle + b"\n", b"").replace(needle, b"")
    if len(stderr) < len(result.stderr):
        return replace(result, stderr=stderr)
    if failure_verdict(result) is not None:
        return replace(result, stderr=stderr)
    message = b"\nexit called during the tests (their main did not return)\n"
    return replace(result, exit_code=EXIT_CALLED_STATUS, stderr=stderr + message)


def _program_verdict(result: ExecResult) -> Judged:
    """A whole-program test: passing means exiting cleanly."""
    failed = failure_verdict(result)
    if failed is None:
        return Judged(Verdict.ACCEPTED, 1.0)
    if failed is Verdict.RUNTIME_ERROR and _ASSERTION.search(result.stderr[-4096:]):
        # A failed assertion is a wrong answer, not a crash.
        return Judged(Verdict.WRONG_ANSWER, 0.0, describe_exit(result))
    return Judged(failed, 0.0, describe_exit(result))


def _mark_test(span: trace.Span, verdict: Verdict, message: str) -> None:
    """A test's verdict on its span; a failed test is an error span (found at a glance)."""
    span.set_attribute("rewardbus.verdict", verdict.value)
    if verdict is not Verdict.ACCEPTED:
        span.set_status(Status(StatusCode.ERROR, f"{verdict.value}: {message}"[:200]))


def _harness_test_spans(
    parent: trace.Span, outcomes: Sequence[TestOutcome], started_ns: int, ended_ns: int
) -> None:
    """One span per test of a harness execution, under its ``tests`` span.

    The worker sees only the whole execution; the harness times each test itself
    (``wall_ms``). The tests ran one after another, so their spans are laid end to
    end back from the execution's end (its start-up comes first), each as long as
    the harness measured it.
    """
    context = trace.set_span_in_context(parent)
    placed: list[tuple[TestOutcome, int, int]] = []
    cursor = ended_ns
    for outcome in reversed(outcomes):
        start = max(started_ns, cursor - int(outcome.wall_ms * 1e6))
        placed.append((outcome, start, cursor))
        cursor = start
    for outcome, start, end in reversed(placed):
        span = _tracer.start_span(
            "test",
            context=context,
            start_time=start,
            attributes={
                "rewardbus.test.index": outcome.index,
                "rewardbus.test.cpu_ms": outcome.cpu_ms,
                "rewardbus.test.timing": "harness",
            },
        )
        _mark_test(span, outcome.verdict, outcome.message)
        span.end(end_time=end)


def _stdin_result(record: HarnessRecord, cpu_source: str) -> ExecResult:
    """A stdin test's record from the harness, as the jail would have reported it.

    ``cpu_source``: the harness execution's (a jail without a cgroup CPU counter says
    so for each of its tests too).
    """
    limit = record.limit
    timed_out_by = limit if limit != "output" else None
    return ExecResult(
        exit_code=record.exit,
        signal=record.signal,
        stdout=_unb64(record.stdout),
        stderr=_unb64(record.stderr),
        wall_ms=record.wall_ms,
        cpu_ms=record.cpu_ms,
        waited_ms=record.waited_ms,
        peak_memory_kb=record.peak_memory_kb,
        timed_out=timed_out_by is not None,
        memory_exceeded=record.oom,
        output_exceeded=limit == "output",
        timed_out_by=timed_out_by,
        cpu_source=cpu_source,
    )


def _unb64(value: str) -> bytes:
    try:
        return binascii.a2b_base64(value)
    except binascii.Error:
        return b""


def _judge_record(
    record: HarnessRecord, expected: Sequence[Any] | None, index: int, tolerance: float | None
) -> Judged:
    """A test's judgement from its record; ``expected``: a call suite's return values."""
    if record.verdict == "returned":
        if expected is None:
            return Judged(Verdict.SANDBOX_ERROR, 0.0, "harness returned a value in assert mode")
        return _judge_returned(record.value, expected[index], tolerance)
    try:
        verdict = Verdict(record.verdict)
    except ValueError:
        return Judged(Verdict.SANDBOX_ERROR, 0.0, f"unknown harness verdict {record.verdict!r}")
    if verdict is Verdict.ACCEPTED and expected is not None:
        # No harness says so of a call: a program that rewrote the harness inside its
        # own test (its json.dumps, its JSON.stringify) made the record.
        return Judged(Verdict.WRONG_ANSWER, 0.0, _CALL_PASSES_BY_VALUE)
    return Judged(verdict, 1.0 if verdict is Verdict.ACCEPTED else 0.0, record.message[:300])


def _judge_returned(value: Any, expected: Any, tolerance: float | None) -> Judged:
    """A call's returned value (unset: it had no JSON form) against the expected one."""
    if value is msgspec.UNSET:
        return Judged(Verdict.WRONG_ANSWER, 0.0, "return value is not JSON-serialisable")
    if call_result_matches(value, expected, tolerance):
        return Judged(Verdict.ACCEPTED, 1.0)
    return Judged(Verdict.WRONG_ANSWER, 0.0, _difference(_show(value), _show(expected)))


def _missing(result: ExecResult) -> Judged:
    """The verdict of the test during which the harness execution ended."""
    verdict = failure_verdict(result)
    if verdict is None:
        return Judged(Verdict.RUNTIME_ERROR, 0.0, "the test reported no result")
    return Judged(verdict, 0.0, describe_exit(result))


def _outcome(index: int, judged: Judged, timing: ExecResult | HarnessRecord | None) -> TestOutcome:
    wall = cpu = 0.0
    memory = 0
    if timing is not None:
        wall, cpu, memory = timing.wall_ms, timing.cpu_ms, timing.peak_memory_kb
    return TestOutcome(
        index=index,
        verdict=judged.verdict,
        wall_ms=round(wall, 3),
        cpu_ms=round(cpu, 3),
        peak_memory_kb=memory,
        score=judged.score,
        message=judged.message,
    )


def _not_run(indices: range, message: str) -> list[TestOutcome]:
    return [TestOutcome(index=i, verdict=Verdict.TIME_LIMIT, message=message) for i in indices]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _difference(actual: str, expected: str) -> str:
    return f"expected {_clip(expected)!r}, got {_clip(actual)!r}"


def _clip(text: str, limit: int = 60) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
