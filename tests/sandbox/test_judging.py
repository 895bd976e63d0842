"""Every test format, scoring option and failure path, with real programs in the real jail."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sandbox_workers import (
    ExecRequest,
    ExecResult,
    Executor,
    ExecutorConfig,
    InvalidCompletion,
    SandboxFault,
)
from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox
from schemas import (
    AssertSuite,
    CheckerProgram,
    CheckerSuite,
    Completion,
    IoSuite,
    Limits,
    TestSuite,
    Verdict,
)

pytestmark = pytest.mark.sandbox

AC, WA, RE, TLE, MLE, OLE = (
    Verdict.ACCEPTED,
    Verdict.WRONG_ANSWER,
    Verdict.RUNTIME_ERROR,
    Verdict.TIME_LIMIT,
    Verdict.MEMORY_LIMIT,
    Verdict.OUTPUT_LIMIT,
)
LIMITS = Limits(time_s=1.0, total_time_s=10.0, memory_mb=128, output_kb=64)


@pytest.fixture(scope="module")
def jail() -> Iterator[JailSandbox]:
    try:
        sandbox = JailSandbox(JailConfig(strict=False))
    except IsolationUnavailable as exc:
        pytest.fail(f"no jail on this host (see rewardbus doctor): {exc}")
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="module")
def executor(jail: JailSandbox, tmp_path_factory: pytest.TempPathFactory) -> Executor:
    cache = tmp_path_factory.getbasetemp() / "executor-cache"
    return Executor(ExecutorConfig(compile_cache_dir=cache), jail)


async def judge(
    executor: Executor,
    code: str | None,
    tests: TestSuite,
    *,
    language: str = "python",
    limits: Limits = LIMITS,
    response: str | None = None,
) -> list[Verdict]:
    event = await executor.run(
        Completion(
            sample_id="s",
            language=language,
            code=code,
            response=response,
            tests=tests,
            limits=limits,
        )
    )
    return [t.verdict for t in event.tests]


def run(executor: Executor, code: str | None, tests: TestSuite, **kw: object) -> Completion:
    return Completion(sample_id="s", code=code, tests=tests, limits=LIMITS, **kw)  # type: ignore[arg-type]


# --- stdin/stdout ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("compare", "printed", "expected", "verdict"),
    [
        ("exact", "print('1 2')", "1 2\n", AC),
        ("exact", "print('1  2')", "1 2\n", WA),
        ("tokens", "print('1\\n2')", "1 2", AC),
        ("float", "print(1/3)", "0.333333333", AC),
        ("float", "print(0.34)", "0.333333333", WA),
    ],
)
async def test_stdin_compare_modes(
    executor: Executor, compare: str, printed: str, expected: str, verdict: Verdict
) -> None:
    suite = IoSuite(inputs=[""], outputs=[expected], compare=compare)  # type: ignore[arg-type]
    assert await judge(executor, printed, suite) == [verdict]


async def test_stdin_partial_score_and_first_failure_verdict(executor: Executor) -> None:
    suite = IoSuite(inputs=["1", "2", "3", "4"], outputs=["1", "4", "9", "15"])
    code = "n = int(input())\nif n == 2:\n    raise SystemExit(5)\nprint(n * n)\n"
    event = await executor.run(run(executor, code, suite))
    assert [t.verdict for t in event.tests] == [AC, RE, AC, WA]
    assert (event.score, event.passed, event.total, event.verdict) == (0.5, 2, 4, RE)
    assert "exit status 5" in event.tests[1].message
    assert "expected '15', got '16'" in event.tests[3].message


async def test_stop_on_first_failure_and_all_or_nothing(executor: Executor) -> None:
    code = "print(int(input()) * 2)\n"
    stop = IoSuite(inputs=["1", "2", "3"], outputs=["2", "5", "6"], stop_on_first_failure=True)
    event = await executor.run(run(executor, code, stop))
    assert [t.verdict for t in event.tests] == [AC, WA]
    assert (event.total, event.passed) == (3, 1)
    assert event.score == pytest.approx(1 / 3)
    strict = IoSuite(inputs=["1", "2"], outputs=["2", "5"], all_or_nothing=True)
    event = await executor.run(run(executor, code, strict))
    assert (event.score, event.passed, event.verdict) == (0.0, 1, WA)


async def test_total_time_limit_marks_the_rest_not_run(executor: Executor) -> None:
    suite = IoSuite(inputs=["a", "b", "c", "d"], outputs=["", "", "", ""])
    limits = Limits(time_s=1.0, total_time_s=0.8)
    # ~0.3 s of CPU per test (the total is CPU time too: load does not spend it).
    code = "import time\nwhile time.process_time() < 0.3:\n    pass\n"
    event = await executor.run(Completion(sample_id="s", code=code, tests=suite, limits=limits))
    # Two tests fit; the third is cut to what is left; the fourth never runs.
    assert [t.verdict for t in event.tests] == [AC, AC, TLE, TLE]
    assert event.tests[2].message.startswith("cpu limit")
    assert "total time limit" in event.tests[3].message
    assert sum(t.cpu_ms for t in event.tests) < 1000
    assert event.score == 0.5


async def test_tails_are_capped_and_from_the_failing_test(executor: Executor) -> None:
    suite = IoSuite(inputs=["ok", "bad"], outputs=["ok", "ok"])
    code = "import sys\ns = input()\nsys.stderr.write('E' * 5000 + s)\nprint(s)\n"
    event = await executor.run(run(executor, code, suite))
    assert event.stdout_tail == "bad\n"
    assert len(event.stderr_tail) == 2048 and event.stderr_tail.endswith("Ebad")


async def test_sql_rows_ignore_order_without_order_by(executor: Executor) -> None:
    schema = "CREATE TABLE t(n INTEGER, s TEXT); INSERT INTO t VALUES (2, 'b'), (1, 'a');"
    suite = IoSuite(inputs=[schema], outputs=["1|a\n2|b\n"])
    assert await judge(executor, "SELECT n, s FROM t;", suite, language="sql") == [AC]
    ordered = "SELECT n, s FROM t ORDER BY n DESC;"
    assert await judge(executor, ordered, suite, language="sql") == [WA]


# --- extraction and static checks -------------------------------------------------


async def test_code_is_extracted_from_the_response(executor: Executor) -> None:
    response = "Idea first.\n```python\nprint(int(input()) + 1)\n```\nOutput:\n```\n3\n```"
    suite = IoSuite(inputs=["2"], outputs=["3"])
    assert await judge(executor, None, suite, response=response) == [AC]


@pytest.mark.parametrize("response", ["I cannot solve this.", "```python\n  \n```", ""])
async def test_no_code_scores_zero_against_every_test(executor: Executor, response: str) -> None:
    suite = IoSuite(inputs=["1", "2"], outputs=["1", "2"])
    event = await executor.run(
        Completion(sample_id="s", response=response, tests=suite, batch_id="b", group_id="g")
    )
    assert (event.verdict, event.score, event.total, event.passed) == (Verdict.NO_CODE, 0.0, 2, 0)
    assert (event.sample_id, event.batch_id, event.group_id) == ("s", "b", "g")


async def test_python_syntax_error_is_a_compile_error(executor: Executor) -> None:
    event = await executor.run(
        run(executor, "print('unclosed)\n", IoSuite(inputs=[""], outputs=[""]))
    )
    assert event.verdict is Verdict.COMPILE_ERROR
    assert "SyntaxError" in event.message and "line 1" in event.message


async def test_compiler_message_is_capped(executor: Executor) -> None:
    code = "int main() {\n" + "  undefined_name_x();\n" * 400 + "}\n"
    suite = IoSuite(inputs=[""], outputs=[""])
    event = await executor.run(
        Completion(sample_id="s", language="c", code=code, tests=suite, limits=LIMITS)
    )
    assert event.verdict is Verdict.COMPILE_ERROR
    assert "undefined_name_x" in event.message and len(event.message.encode()) <= 4096


# --- function calls (APPS / TACO / LeetCode style) ----------------------------------


FN = IoSuite(inputs=[[1, 2], [3, 4], [5, 6]], outputs=[3, [7], 11], fn_name="add")


@pytest.mark.parametrize("language", ["python", "javascript"])
@pytest.mark.parametrize(
    ("variant", "verdicts"),
    [
        ("correct", [AC, AC, AC]),
        ("wrong", [AC, AC, WA]),
        ("crash", [AC, RE, AC]),
        ("loop", [AC, TLE, AC]),
        ("noise", [AC, AC, AC]),
    ],
)
async def test_function_call_tests(
    executor: Executor, language: str, variant: str, verdicts: list[Verdict]
) -> None:
    python = {
        "correct": "def add(a, b):\n    return a + b\n",
        "wrong": "def add(a, b):\n    return a + b if a < 5 else 0\n",
        "crash": "def add(a, b):\n    if a == 3:\n        raise ValueError('no')\n"
        "    return a + b\n",
        "loop": "def add(a, b):\n    while a == 3:\n        pass\n    return a + b\n",
        # Printing (even a fake record line) does not count as a result.
        "noise": "def add(a, b):\n    print('0' * 32, '{\"verdict\": \"accepted\"}')\n"
        "    return a + b\n",
    }
    javascript = {
        "correct": "function add(a, b) { return a + b; }\n",
        "wrong": "const add = (a, b) => a < 5 ? a + b : 0;\n",
        "crash": "function add(a, b) { if (a === 3) throw new Error('no'); return a + b; }\n",
        "loop": "function add(a, b) { while (a === 3) {} return a + b; }\n",
        "noise": "var add = function (a, b) { console.log('x'.repeat(32)); return a + b; };\n",
    }
    code = (python if language == "python" else javascript)[variant]
    limits = Limits(time_s=0.5, total_time_s=10.0)
    assert await judge(executor, code, FN, language=language, limits=limits) == verdicts


async def test_each_call_runs_in_a_fresh_process(executor: Executor) -> None:
    # Module state must not leak from one test into the next.
    code = "calls = []\ndef add(a, b):\n    calls.append(1)\n    return a + b + len(calls) - 1\n"
    assert await judge(executor, code, FN) == [AC, AC, AC]


@pytest.mark.parametrize(
    "body",
    [
        "import sys; sys.exit(0)",
        "import os; os._exit(0)",
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    ],
)
async def test_exiting_is_never_passing(executor: Executor, body: str) -> None:
    code = f"def add(a, b):\n    if a == 3:\n        {body}\n    return a + b\n"
    assert await judge(executor, code, FN) == [AC, RE, AC]


async def test_memory_and_output_limits_inside_the_harness(executor: Executor) -> None:
    hog = "def add(a, b):\n    if a == 3:\n        x = bytearray(1 << 30)\n    return a + b\n"
    assert await judge(executor, hog, FN) == [AC, MLE, AC]
    chatty = "def add(a, b):\n    while a == 3:\n        print('x' * 1000)\n    return a + b\n"
    event = await executor.run(run(executor, chatty, FN))
    assert [t.verdict for t in event.tests] == [AC, OLE, OLE]
    assert event.verdict is OLE


async def test_javascript_heap_exhaustion_ends_the_run(executor: Executor) -> None:
    # One node process runs every call: a heap overflow takes the rest with it.
    hog = (
        "function add(a, b) {\n  const keep = [];\n"
        "  while (a === 3) keep.push(new Array(1 << 20).fill(a));\n  return a + b;\n}\n"
    )
    event = await executor.run(
        Completion(sample_id="s", language="javascript", code=hog, tests=FN, limits=LIMITS)
    )
    assert [t.verdict for t in event.tests] == [AC, MLE, MLE]
    assert "not run" in event.tests[2].message


async def test_unencodable_code_is_judged_not_raised(executor: Executor) -> None:
    # A lone surrogate (possible in JSON input) reaches the toolchain as bytes.
    suite = IoSuite(inputs=[""], outputs=[""])
    expected = {"python": Verdict.COMPILE_ERROR, "c": Verdict.COMPILE_ERROR, "javascript": AC}
    for language, verdict in expected.items():
        event = await executor.run(
            Completion(sample_id="s", language=language, code="x = '\ud800'\n", tests=suite)
        )
        assert event.verdict is verdict, language


async def test_python_call_conventions(executor: Executor) -> None:
    leetcode = "class Solution:\n    def pair(self, a, b):\n        return (a, [b])\n"
    suite = IoSuite(inputs=[[1, 2]], outputs=[[1, [2]]], fn_name="pair")
    assert await judge(executor, leetcode, suite) == [AC]
    unserialisable = "def pair(a, b):\n    return object()\n"
    assert await judge(executor, unserialisable, suite) == [WA]
    floats = IoSuite(inputs=[[1, 3]], outputs=[0.3333333], fn_name="div", compare="float")
    assert await judge(executor, "def div(a, b):\n    return a / b\n", floats) == [AC]


async def test_function_missing_is_a_runtime_error(executor: Executor) -> None:
    event = await executor.run(run(executor, "def other():\n    pass\n", FN))
    assert event.verdict is RE and "add" in event.tests[0].message


async def test_harness_stops_at_the_first_failure_when_asked(executor: Executor) -> None:
    suite = IoSuite(
        inputs=[[1, 2], [3, 4], [5, 6]],
        outputs=[3, 7, 11],
        fn_name="add",
        stop_on_first_failure=True,
    )
    crash = "def add(a, b):\n    if a == 3:\n        raise ValueError\n    return a + b\n"
    event = await executor.run(run(executor, crash, suite))
    assert [t.verdict for t in event.tests] == [AC, RE]
    assert (event.total, event.passed) == (3, 1)


async def test_harness_total_time_limit(executor: Executor) -> None:
    code = (
        "import time\n"
        "def add(a, b):\n"
        "    end = time.process_time() + 0.4\n"
        "    while time.process_time() < end:\n"
        "        pass\n"
        "    return a + b\n"
    )
    limits = Limits(time_s=1.0, total_time_s=0.7)
    event = await executor.run(Completion(sample_id="s", code=code, tests=FN, limits=limits))
    # The second test gets what is left (0.3 s of CPU) and is stopped; the third never runs.
    assert [t.verdict for t in event.tests] == [AC, TLE, TLE]
    assert event.tests[1].message.startswith("cpu limit")
    assert "total time limit" in event.tests[2].message


# --- assert suites (HumanEval / MBPP / MultiPL-E) -----------------------------------


HUMANEVAL = AssertSuite(
    code="def check(candidate):\n"
    "    assert candidate([1, 2, 3]) == 6\n"
    "    assert candidate([]) == 0\n",
    entry_point="total",
)


@pytest.mark.parametrize(
    ("code", "verdict"),
    [
        ("def total(xs):\n    return sum(xs)\n", AC),
        ("def total(xs):\n    return len(xs)\n", WA),
        ("def total(xs):\n    return xs[10]\n", RE),
        ("import sys\ndef total(xs):\n    sys.exit(0)\n", RE),
        ("import os\ndef total(xs):\n    os._exit(0)\n", RE),
        ("def total(xs):\n    while True:\n        pass\n", TLE),
        ("import sys\nsys.exit(0)\n", RE),
    ],
)
async def test_humaneval_style(executor: Executor, code: str, verdict: Verdict) -> None:
    limits = Limits(time_s=0.5)
    assert await judge(executor, code, HUMANEVAL, limits=limits) == [verdict]


async def test_mbpp_cases_are_scored_separately(executor: Executor) -> None:
    suite = AssertSuite(
        cases=["assert square(2) == 4", "assert square(3) == 9", "assert candidate(4) == 15"],
        entry_point="square",
    )
    event = await executor.run(run(executor, "def square(x):\n    return x * x\n", suite))
    assert [t.verdict for t in event.tests] == [AC, AC, WA]
    assert (event.total, event.passed) == (3, 2)
    assert event.score == pytest.approx(2 / 3)


async def test_javascript_assert_suite(executor: Executor) -> None:
    suite = AssertSuite(
        code="const assert = require('node:assert');\n",
        cases=["assert.deepStrictEqual(twice([1]), [1, 1]);", "assert.strictEqual(twice([]), 0);"],
    )
    code = "function twice(xs) { return xs.concat(xs); }\n"
    assert await judge(executor, code, suite, language="javascript") == [AC, WA]
    escape = "const fs = require('fs');\nfunction twice(xs) { return xs; }\n"
    assert await judge(executor, escape, suite, language="javascript") == [RE, RE]


async def test_compiled_assert_suite_multipl_e_style(executor: Executor) -> None:
    suite = AssertSuite(
        code="#include <cassert>\n"
        "int main() {\n  assert(add(2, 3) == 5);\n  assert(add(-1, 1) == 0);\n}\n"
    )
    good = "int add(int a, int b) { return a + b; }\n"
    bad = "int add(int a, int b) { return a * b; }\n"
    assert await judge(executor, good, suite, language="cpp") == [AC]
    assert await judge(executor, bad, suite, language="cpp") == [WA]


# --- special judges -------------------------------------------------------------------


PY_CHECKER = """import sys
given = open(sys.argv[2]).read().split()
answer = open(sys.argv[3]).read().split()
if given == answer:
    sys.exit(0)
if sorted(given) == sorted(answer):
    print(0.5)  # right numbers, wrong order: half credit
    sys.exit(1)
if given == ['FAIL']:
    sys.exit(3)
sys.exit(2 if given == [] else 1)
"""

CPP_CHECKER = """#include <fstream>
int main(int argc, char** argv) {
  std::ifstream in(argv[1]), out(argv[2]), ans(argv[3]);
  long n, got, want;
  in >> n; ans >> want;
  if (!(out >> got)) return 2;
  return got % n == want % n ? 0 : 1;
}
"""


@pytest.mark.parametrize(
    ("printed", "verdict", "score"),
    [
        ("1 2 3", AC, 1.0),
        ("3 2 1", WA, 0.5),
        ("4 5 6", WA, 0.0),
        ("", WA, 0.0),
        ("FAIL", Verdict.SANDBOX_ERROR, 0.0),
    ],
)
async def test_python_checker(
    executor: Executor, printed: str, verdict: Verdict, score: float
) -> None:
    suite = CheckerSuite(
        inputs=["3"], outputs=["1 2 3"], checker=CheckerProgram(language="python", code=PY_CHECKER)
    )
    event = await executor.run(run(executor, f"print({printed!r})\n", suite))
    assert (event.tests[0].verdict, event.tests[0].score, event.score) == (verdict, score, score)


async def test_compiled_checker_is_compiled_once(executor: Executor) -> None:
    suite = CheckerSuite(
        inputs=["7", "7"],
        outputs=["3", "4"],
        checker=CheckerProgram(language="cpp", code=CPP_CHECKER),
    )
    code = "print(10)\n"  # 10 = 3 (mod 7), != 4 (mod 7)
    await executor.run(run(executor, code, suite))
    misses = executor.compile_cache.stats.misses
    event = await executor.run(run(executor, code, suite))
    assert [t.verdict for t in event.tests] == [AC, WA]
    assert executor.compile_cache.stats.misses == misses


async def test_checker_that_does_not_compile_is_a_sandbox_error(executor: Executor) -> None:
    suite = CheckerSuite(
        inputs=["1"], outputs=["1"], checker=CheckerProgram(language="c", code="int main( {")
    )
    event = await executor.run(run(executor, "print(1)\n", suite))
    assert event.verdict is Verdict.SANDBOX_ERROR
    assert "checker does not compile" in event.tests[0].message


async def test_checker_is_not_run_when_the_program_fails(executor: Executor) -> None:
    suite = CheckerSuite(
        inputs=["3"], outputs=["1 2 3"], checker=CheckerProgram(language="python", code=PY_CHECKER)
    )
    assert await judge(executor, "raise SystemExit(1)\n", suite) == [RE]


# --- completions that cannot be judged ---------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        (Completion(sample_id="s", code="print(1)"), "no tests"),
        (
            Completion(
                sample_id="s", language="cobol", code="x", tests=IoSuite(inputs=[""], outputs=[""])
            ),
            "unsupported language",
        ),
        (
            Completion(sample_id="s", language="c", code="x", tests=FN),
            "not supported for c",
        ),
        (
            Completion(sample_id="s", code="x", tests=IoSuite(inputs=["1"], outputs=[])),
            "1 inputs but 0 outputs",
        ),
        (Completion(sample_id="s", code="x", tests=IoSuite(inputs=[], outputs=[])), "empty"),
    ],
)
async def test_invalid_completions_raise(
    executor: Executor, completion: Completion, reason: str
) -> None:
    with pytest.raises(InvalidCompletion, match=reason) as raised:
        await executor.run(completion)
    assert raised.value.retriable is False


async def test_suite_argument_overrides_inline_tests(executor: Executor) -> None:
    completion = Completion(sample_id="s", code="print(2)\n", problem_id="p1")
    event = await executor.run(completion, IoSuite(inputs=[""], outputs=["2"]))
    assert event.verdict is AC


# --- sandbox faults ------------------------------------------------------------------------


@dataclass
class Flaky:
    """Wraps the jail; its first ``failures`` executions fail as infrastructure faults."""

    inner: JailSandbox
    failures: int

    @property
    def degraded(self) -> tuple[str, ...]:
        return ("test-layer",)

    async def execute(self, request: ExecRequest) -> ExecResult:
        if self.failures > 0:
            self.failures -= 1
            raise SandboxFault("injected")
        return await self.inner.execute(request)

    async def aclose(self) -> None:
        """The wrapped jail belongs to its fixture, which closes it."""


async def test_sandbox_faults_are_retried(jail: JailSandbox, executor: Executor) -> None:
    config = ExecutorConfig(worker_id="w1", max_attempts=2)
    flaky = Executor(config, Flaky(jail, failures=1))
    event = await flaky.run(run(executor, "print(1)\n", IoSuite(inputs=[""], outputs=["1"])))
    assert (event.verdict, event.attempt, event.worker_id) == (AC, 2, "w1")
    assert event.degraded == ["test-layer"]


async def test_persistent_faults_are_sandbox_errors_not_wrong_answers(
    jail: JailSandbox, executor: Executor
) -> None:
    broken = Executor(ExecutorConfig(max_attempts=3), Flaky(jail, failures=10))
    event = await broken.run(run(executor, "print(1)\n", IoSuite(inputs=[""], outputs=["1"])))
    assert (event.verdict, event.attempt, event.score) == (Verdict.SANDBOX_ERROR, 3, 0.0)
    assert "injected" in event.message
