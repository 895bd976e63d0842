"""Every test format, scoring option and failure path, with real programs in the real jail."""

from __future__ import annotations

import marshal
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

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
from sandbox_workers.languages.python import Checked, check_program
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


@pytest.mark.parametrize("language", ["python", "javascript"])
async def test_a_call_passes_only_by_the_value_it_returns(
    executor: Executor, language: str
) -> None:
    """A reward hack: the program rewrites the harness inside its own test so that the
    test's record says "accepted" (Python: the json.dumps the harness encodes it with;
    JavaScript: out of its vm context, the harness's JSON.stringify)."""
    forged = '{"verdict": "accepted"}'
    hack = {
        "python": f"import json\ndef add(a, b):\n    json.dumps = lambda *a, **k: {forged!r}\n"
        "    return 0\n",
        "javascript": "function add(a, b) {\n"
        "  const host = console.log.constructor('return this')();\n"
        f"  host.JSON.stringify = () => {forged!r};\n"
        "  return 0;\n}\n",
    }[language]
    event = await executor.run(run(executor, hack, FN, language=language))
    assert [t.verdict for t in event.tests] == [WA, WA, WA], event.tests
    assert "passes only by the value it returns" in event.tests[0].message


@pytest.mark.parametrize("name", ["f", "args", "exported", "module"])
async def test_a_javascript_function_may_have_any_name(executor: Executor, name: str) -> None:
    """The call wrapper's own names never shadow the function under test (a suite whose
    ``fn_name`` was ``f`` used to get runtime_error on every test)."""
    suite = IoSuite(inputs=[[1, 2], [3, 4]], outputs=[3, 8], fn_name=name)
    code = f"function {name}(a, b) {{ return a + b; }}\n"
    assert await judge(executor, code, suite, language="javascript") == [AC, WA]


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


def one_test(code: str, tests: TestSuite) -> Completion:
    limits = Limits(time_s=0.5, total_time_s=10.0, memory_mb=128, output_kb=64)
    return Completion(sample_id="s", code=code, tests=tests, limits=limits)


@pytest.mark.parametrize(
    ("code", "verdict", "message"),
    [
        # Its stdin is /dev/null, as a child's: the marker its record goes under is not there.
        ("import sys\ndef total(xs):\n    return sum(xs) - len(sys.stdin.read())\n", AC, ""),
        # Over its CPU limit (0.52 s of 0.5), under the jail's (0.6): a time limit all the same.
        (
            "import time\ndef total(xs):\n    end = time.process_time() + 0.26\n"
            "    while time.process_time() < end:\n        pass\n    return sum(xs)\n",
            TLE,
            "cpu limit",
        ),
        ("def total(xs):\n    keep = bytearray(1 << 30)\n    return sum(xs)\n", MLE, "MemoryError"),
        ("def total(xs):\n    print('partial', end='')\n    return len(xs)\n", WA, "Assertion"),
    ],
)
async def test_a_suite_s_only_test_runs_in_the_harness_s_own_process_as_in_a_child(
    executor: Executor, code: str, verdict: Verdict, message: str
) -> None:
    """One test: the harness runs it in its own process, not in a forked child
    (pyharness ``_alone``), and judges it as it would in a child."""
    event = await executor.run(one_test(code, HUMANEVAL))
    assert [t.verdict for t in event.tests] == [verdict], event.tests
    assert message in event.tests[0].message
    assert 0 < event.tests[0].cpu_ms < 2000


async def test_a_suite_s_only_test_ends_without_waiting_for_the_program_s_threads(
    executor: Executor,
) -> None:
    """Its record written, the harness exits at once (as a test's child does): a thread the
    program left running is not joined, nor does it run into the wall backstop (1.6 s)."""
    code = (
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(3600,)).start()\n"
        "print('kept')\ndef total(xs):\n    return sum(xs)\n"
    )
    event = await executor.run(one_test(code, HUMANEVAL))
    assert [t.verdict for t in event.tests] == [AC], event.tests
    assert event.exec_ms < 1500, event.exec_ms
    assert event.stdout_tail == "kept\n"


@pytest.mark.parametrize("suite", [FN, IoSuite(inputs=[[1, 2]], outputs=[3], fn_name="add")])
async def test_a_program_s_annotations_are_evaluated_as_python_evaluates_them(
    executor: Executor, suite: IoSuite
) -> None:
    """Not postponed by the harness's own ``from __future__ import annotations``."""
    code = "def add(a: Undefined, b):\n    return a + b\n"
    event = await executor.run(one_test(code, suite))
    assert {t.verdict for t in event.tests} == {RE}, event.tests
    assert "name 'Undefined' is not defined" in event.tests[0].message
    assert await judge(executor, "def add(a: int, b: 'Later'):\n    return a + b\n", suite) == [
        AC
    ] * len(suite.inputs)


async def test_a_single_call_passes_only_by_the_value_it_returns(executor: Executor) -> None:
    """The forged record of test_a_call_passes_only_by_the_value_it_returns, from a
    suite's only call (run in the harness's own process)."""
    hack = (
        "import json\ndef add(a, b):\n"
        '    json.dumps = lambda *a, **k: \'{"verdict": "accepted"}\'\n    return 0\n'
    )
    suite = IoSuite(inputs=[[1, 2]], outputs=[3], fn_name="add")
    event = await executor.run(one_test(hack, suite))
    assert [t.verdict for t in event.tests] == [WA], event.tests
    assert "passes only by the value it returns" in event.tests[0].message
    honest = await judge(executor, "def add(a, b):\n    return a + b\n", suite)
    assert honest == [AC]


async def test_mbpp_cases_are_scored_separately(executor: Executor) -> None:
    suite = AssertSuite(
        cases=["assert square(2) == 4", "assert square(3) == 9", "assert candidate(4) == 15"],
        entry_point="square",
    )
    event = await executor.run(run(executor, "def square(x):\n    return x * x\n", suite))
    assert [t.verdict for t in event.tests] == [AC, AC, WA]
    assert (event.total, event.passed) == (3, 2)
    assert event.score == pytest.approx(2 / 3)


# Reward hacks on Python assert suites: the tests compare the program's value in its own
# process, so a value whose comparison is not an equality passed every `==` assert.
_EQUALITY_HACKS = {
    "eq-always-true": "class A:\n    def __eq__(self, other):\n        return True\n"
    "def total(xs):\n    return A()\n",
    "int-subclass": "class I(int):\n    __eq__ = lambda self, other: True\n"
    "    __hash__ = int.__hash__\ndef total(xs):\n    return I(7)\n",
    "eq-true-for-its-types": "class A:\n    def __eq__(self, other):\n"
    "        return isinstance(other, (int, float, list, str))\n"
    "def total(xs):\n    return A()\n",
    "ne-always-false": "class A:\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
    "def total(xs):\n    return A()\n",
}
# Each form of comparison the guard covers, in cases of their own.
_FORMS_SUITE = AssertSuite(
    cases=[
        "assert candidate([1, 2]) == 3",
        "assert not (candidate([]) != 0)",
        "assert candidate([4]) in (4, 5)",
        "assert not (candidate([1]) not in (1, 7))",
    ],
    entry_point="total",
)
_CONTAINER_SUITE = AssertSuite(
    cases=["assert 2 in candidate([1, 2, 3])", "assert not (4 not in candidate([3, 4]))"],
    entry_point="evens",
)


# HumanEval's shape for float answers.
_TOLERANCE_SUITE = AssertSuite(
    code="def check(candidate):\n    assert abs(candidate([1.0, 2.0]) - 1.5) < 1e-6\n",
    entry_point="mean",
)
_TOLERANCE_HACKS = {
    "sub-always-zero": "class Z:\n    __sub__ = lambda s, o: 0\n    __rsub__ = __sub__\n"
    "def mean(xs):\n    return Z()\n",
    "lt-always-true": "class L:\n    __sub__ = lambda s, o: s\n    __abs__ = lambda s: s\n"
    "    __lt__ = lambda s, o: True\ndef mean(xs):\n    return L()\n",
    # The tests' abs() answered by the program's own.
    "shadowed-abs": "abs = lambda x: 0\ndef mean(xs):\n    return 7.0\n",
}


@pytest.mark.parametrize("hack", _TOLERANCE_HACKS.values(), ids=_TOLERANCE_HACKS.keys())
async def test_a_value_that_fakes_a_tolerance_check_does_not_pass_it(
    executor: Executor, hack: str
) -> None:
    assert await judge(executor, hack, _TOLERANCE_SUITE) == [WA]
    honest = "from fractions import Fraction\ndef mean(xs):\n    return Fraction(3, 2)\n"
    assert await judge(executor, honest, _TOLERANCE_SUITE) == [AC]


async def test_a_value_inside_every_range_does_not_pass_a_chained_comparison(
    executor: Executor,
) -> None:
    suite = AssertSuite(cases=["assert 0 <= candidate([0.5, 1.0]) < 1"], entry_point="mean")
    hack = (
        "class R:\n    __le__ = __lt__ = __ge__ = __gt__ = lambda s, o: True\n"
        "def mean(xs):\n    return R()\n"
    )
    assert await judge(executor, hack, suite) == [WA]
    honest = "def mean(xs):\n    return sum(xs) / len(xs)\n"
    assert await judge(executor, honest, suite) == [AC]


@pytest.mark.parametrize("hack", _EQUALITY_HACKS.values(), ids=_EQUALITY_HACKS.keys())
async def test_a_value_that_equals_anything_does_not_pass_the_asserts(
    executor: Executor, hack: str
) -> None:
    event = await executor.run(run(executor, hack, HUMANEVAL))
    assert (event.verdict, event.score) == (WA, 0.0), event
    assert "is not an equality" in event.tests[0].message


@pytest.mark.parametrize("cache_bytes", [32 << 20, 0], ids=["by-the-worker", "in-the-sandbox"])
async def test_assert_tests_judge_alike_compiled_by_the_worker_or_in_the_sandbox(
    jail: JailSandbox, tmp_path: Path, cache_bytes: int
) -> None:
    """The worker compiles a suite's tests once (TestCodeCache); without that, the
    harness compiles them in the sandbox: verdicts and the guard are the same."""
    config = ExecutorConfig(compile_cache_dir=tmp_path, test_code_cache_bytes=cache_bytes)
    executor = Executor(config, jail)
    honest = "def total(xs):\n    return sum(xs)\n"
    assert await judge(executor, honest, HUMANEVAL) == [AC]
    assert await judge(executor, _EQUALITY_HACKS["eq-always-true"], HUMANEVAL) == [WA]
    assert await judge(executor, honest, _FORMS_SUITE) == [AC] * 4
    assert await judge(executor, _EQUALITY_HACKS["ne-always-false"], _FORMS_SUITE) == [WA] * 4


async def test_assert_test_code_that_does_not_compile_is_a_sandbox_error(
    executor: Executor,
) -> None:
    suite = AssertSuite(code="def check(candidate):\n    assert candidate(\n", entry_point="f")
    event = await executor.run(run(executor, "def f():\n    return 1\n", suite))
    assert event.verdict is Verdict.SANDBOX_ERROR, event
    assert "test code does not compile" in event.tests[0].message


async def test_the_comparisons_guard_each_form_of_the_tests(executor: Executor) -> None:
    """==, !=, in and not in, each on its own: the hack fails every one, honest code none."""
    hack = _EQUALITY_HACKS["ne-always-false"]
    honest = "def total(xs):\n    return sum(xs)\n"
    for code, verdicts in ((hack, [WA] * 4), (honest, [AC] * 4)):
        assert await judge(executor, code, _FORMS_SUITE) == verdicts, code
    # A container of the program's that holds everything.
    hack = "class C(list):\n    __contains__ = lambda s, o: True\ndef evens(xs):\n    return C()\n"
    honest = "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\n"
    for code, verdicts in ((hack, [WA] * 2), (honest, [AC] * 2)):
        assert await judge(executor, code, _CONTAINER_SUITE) == verdicts, code


@pytest.mark.parametrize(
    "code",
    [
        "from fractions import Fraction\ndef total(xs):\n    return Fraction(sum(xs), 1)\n",
        "from decimal import Decimal\ndef total(xs):\n    return Decimal(sum(xs))\n",
        "class I(int):\n    pass\ndef total(xs):\n    return I(sum(xs))\n",
        # A class of its own whose equality is honest (it compares the value).
        "class Money:\n    def __init__(self, v):\n        self.v = v\n"
        "    def __eq__(self, other):\n        return self.v == other\n"
        "def total(xs):\n    return Money(sum(xs))\n",
        "import collections\nP = collections.namedtuple('P', 'n')\n"
        "def total(xs):\n    return P(sum(xs))[0]\n",
    ],
    ids=["fraction", "decimal", "int-subclass", "honest-class", "namedtuple-item"],
)
async def test_honest_values_of_other_types_still_pass(executor: Executor, code: str) -> None:
    assert await judge(executor, code, HUMANEVAL) == [AC]


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


@pytest.mark.parametrize(
    ("language", "header", "hack"),
    [
        ("cpp", "<cassert>", "#define NDEBUG\n#include <cassert>\n"),
        ("cpp", "<cassert>", "#include <cassert>\n#undef assert\n#define assert(x) ((void)0)\n"),
        ("c", "<assert.h>", "#define NDEBUG\n#include <assert.h>\n"),
        ("c", "<assert.h>", "#define assert(x) 0\n"),
    ],
    ids=["cpp-ndebug", "cpp-assert-macro", "c-ndebug", "c-assert-macro"],
)
async def test_a_program_cannot_switch_off_the_asserts_that_judge_it(
    executor: Executor, language: str, header: str, hack: str
) -> None:
    """A reward hack: the program comes first in the translation unit, so a program
    that defines NDEBUG (or its own assert) would turn every test into a pass."""
    suite = AssertSuite(
        code=f"#include {header}\n"
        "int main(void) {\n  assert(add(2, 3) == 5);\n  assert(add(-1, 1) == 0);\n}\n"
    )
    bad = f"{hack}int add(int a, int b) {{ return a * b; }}\n"
    assert await judge(executor, bad, suite, language=language) == [WA]


async def test_a_rust_program_cannot_shadow_the_assert_macros_that_judge_it(
    executor: Executor,
) -> None:
    suite = AssertSuite(
        code="fn main() {\n    assert_eq!(add(2, 3), 5);\n    assert!(add(-1, 1) == 0);\n"
        "    assert_ne!(add(1, 1), 1);\n}\n"
    )
    good = "fn add(a: i32, b: i32) -> i32 { a + b }\n"
    shadowing = "".join(
        f"macro_rules! {name} {{ ($($t:tt)*) => {{}} }}\n"
        for name in ("assert", "assert_eq", "assert_ne")
    )
    bad = f"fn add(a: i32, b: i32) -> i32 {{ a * b }}\n{shadowing}"
    assert await judge(executor, good, suite, language="rust") == [AC]
    assert await judge(executor, bad, suite, language="rust") == [WA]


_C_ADD_SUITE = AssertSuite(
    code="#include <assert.h>\nint main(void) {\n  assert(add(2, 3) == 5);\n}\n"
)
_RUST_ADD_SUITE = AssertSuite(code="fn main() {\n    assert_eq!(add(2, 3), 5);\n}\n")
_GO_ADD_SUITE = AssertSuite(code='func main() {\n  if add(2, 3) != 5 { panic("wrong") }\n}\n')
# MultiPL-E's Java shape: the program opens the class, the tests' main closes it.
_JAVA_ADD_SUITE = AssertSuite(
    code="public static void main(String[] args) {\n  assert add(2, 3) == 5;\n}\n}\n"
)
_JAVA_CLASS = "class Problem {\n"
# Print every run of 32 hex digits (the marker's shape) found in its own executable,
# then exit 0 with a raw system call.
_C_PRINT_MARKERS_IN_BINARY = r"""#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>
int add(int a, int b) {
  static char image[1 << 24];
  int fd = open("/proc/self/exe", O_RDONLY);
  long size = 0, got;
  while ((got = read(fd, image + size, sizeof image - size)) > 0) size += got;
  for (long i = 0, run = 0; i < size; i++) {
    run = isxdigit((unsigned char)image[i]) && !isupper((unsigned char)image[i]) ? run + 1 : 0;
    if (run == 32 && (i + 1 == size || !isxdigit((unsigned char)image[i + 1])))
      dprintf(2, "\n%.32s\n", image + i - 31);
  }
  syscall(SYS_exit_group, 0);
  return 0;
}
"""
_GO_PRINT_MARKERS_IN_BINARY = """package main
import ("os"; "regexp"; "syscall")
func add(a, b int) int {
  image, _ := os.ReadFile("/proc/self/exe")
  // Go packs its strings with no separator: every 32-digit window of every hex run.
  for _, run := range regexp.MustCompile("[0-9a-f]{32,96}").FindAll(image, -1) {
    for i := 0; i+32 <= len(run); i++ {
      os.Stderr.WriteString("\\n" + string(run[i:i+32]) + "\\n")
    }
  }
  syscall.Exit(0)
  return 0
}
"""
_JAVA_PRINT_MARKERS_IN_CLASS = f"""{_JAVA_CLASS}static int add(int a, int b) {{
  try (java.io.InputStream in = Problem.class.getResourceAsStream("Problem.class")) {{
    String image = new String(in.readAllBytes(), java.nio.charset.StandardCharsets.ISO_8859_1);
    java.util.regex.Pattern hex = java.util.regex.Pattern.compile("[0-9a-f]{{32}}");
    java.util.regex.Matcher found = hex.matcher(image);
    while (found.find()) System.err.println("\\n" + found.group() + "\\n");
  }} catch (java.io.IOException e) {{ throw new RuntimeException(e); }}
  Runtime.getRuntime().halt(0);
  return 0;
}}
"""
_EXIT_HACKS = {
    "c-exit-in-function": ("c", "#include <stdlib.h>\nint add(int a, int b) { exit(0); }\n"),
    "c-exit-status-1": ("c", "#include <stdlib.h>\nint add(int a, int b) { exit(1); }\n"),
    "c-constructor-_exit": (
        "c",
        "#include <unistd.h>\n__attribute__((constructor)) static void h(void) { _exit(0); }\n"
        "int add(int a, int b) { return a * b; }\n",
    ),
    "c-pthread_exit": ("c", "#include <pthread.h>\nint add(int a, int b) { pthread_exit(0); }\n"),
    "cpp-std-exit": ("cpp", "#include <cstdlib>\nint add(int a, int b) { std::exit(0); }\n"),
    "cpp-static-_Exit": (
        "cpp",
        "#include <cstdlib>\nstatic int h = (std::_Exit(0), 0);\n"
        "int add(int a, int b) { return a * b; }\n",
    ),
    "cpp-quick_exit": (
        "cpp",
        "#include <cstdlib>\nint add(int a, int b) { std::quick_exit(0); }\n",
    ),
    "rust-process-exit": ("rust", "fn add(_a: i32, _b: i32) -> i32 { std::process::exit(0) }\n"),
    "c-raw-exit_group": (
        "c",
        "#include <unistd.h>\n#include <sys/syscall.h>\n"
        "int add(int a, int b) { syscall(SYS_exit_group, 0); return 0; }\n",
    ),
    "rust-raw-exit_group": (
        "rust",
        'extern "C" { fn syscall(n: i64, ...) -> i64; }\n'
        "fn add(_a: i32, _b: i32) -> i32 { unsafe { syscall(231, 0i64); } 0 }\n",
    ),
    # libc's real exit, reached around the linker's redirection: destructors still run.
    "c-__real_exit": (
        "c",
        "extern void __real_exit(int);\nint add(int a, int b) { __real_exit(0); }\n",
    ),
    "cpp-dlsym-exit": (
        "cpp",
        "#include <dlfcn.h>\nint add(int a, int b) {\n"
        '  reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "exit"))(0);\n}\n',
    ),
    "rust-__real_exit": (
        "rust",
        'extern "C" { fn __real_exit(status: i32) -> !; }\n'
        "fn add(_a: i32, _b: i32) -> i32 { unsafe { __real_exit(0) } }\n",
    ),
    # Find the marker in its own binary, print it, and leave.
    "c-marker-read-from-the-binary": ("c", _C_PRINT_MARKERS_IN_BINARY),
    "go-marker-read-from-the-binary": ("go", _GO_PRINT_MARKERS_IN_BINARY),
    "java-marker-read-from-the-class-file": ("java", _JAVA_PRINT_MARKERS_IN_CLASS),
    "go-init-os-exit": (
        "go",
        'package main\nimport "os"\nfunc init() { os.Exit(0) }\n'
        "func add(a, b int) int { return a * b }\n",
    ),
    "go-os-exit-in-function": (
        "go",
        'package main\nimport "os"\nfunc add(a, b int) int { os.Exit(0); return 0 }\n',
    ),
    "go-syscall-exit": (
        "go",
        'package main\nimport "syscall"\nfunc add(a, b int) int { syscall.Exit(0); return 0 }\n',
    ),
    "java-system-exit": (
        "java",
        f"{_JAVA_CLASS}static int add(int a, int b) {{ System.exit(0); return 0; }}\n",
    ),
    "java-static-halt": (
        "java",
        f"{_JAVA_CLASS}static {{ Runtime.getRuntime().halt(0); }}\n"
        "static int add(int a, int b) { return a * b; }\n",
    ),
}
_EXIT_GOOD = {
    "c": "int add(int a, int b) { return a + b; }\n",
    # A program of its own `write` and threads: the guard must not clash with either.
    "cpp": "#include <thread>\nint write(int x) { return x; }\n"
    "int add(int a, int b) { int s = 0; std::thread t([&] { s = a + b; }); t.join(); return s; }\n",
    "rust": "fn write() {}\nfn add(a: i32, b: i32) -> i32 {\n"
    "    std::thread::spawn(move || a + b).join().unwrap()\n}\n",
    # Its own init and output on stderr after the tests' main must not hide the marker.
    "go": 'package main\nimport "os"\nfunc init() { os.Stderr.WriteString("init\\n") }\n'
    "func add(a, b int) int { return a + b }\n",
    "java": f"{_JAVA_CLASS}static int add(int a, int b) {{ return a + b; }}\n",
}


def _exit_suite(language: str) -> AssertSuite:
    suites = {"rust": _RUST_ADD_SUITE, "go": _GO_ADD_SUITE, "java": _JAVA_ADD_SUITE}
    return suites.get(language, _C_ADD_SUITE)


@pytest.mark.parametrize(("language", "hack"), _EXIT_HACKS.values(), ids=_EXIT_HACKS.keys())
async def test_a_program_cannot_exit_before_the_asserts_that_judge_it(
    executor: Executor, language: str, hack: str
) -> None:
    """A reward hack: a compiled assert suite passes when its process exits 0, so a
    program exiting (with any status) before the asserts ran would pass them all."""
    event = await executor.run(
        Completion(
            sample_id="s", language=language, code=hack, tests=_exit_suite(language), limits=LIMITS
        )
    )
    assert (event.verdict, event.score) == (RE, 0.0)
    assert "exit called during the tests" in event.message
    assert "exit called during the tests" in event.stderr_tail


@pytest.mark.parametrize("language", _EXIT_GOOD)
async def test_the_exit_guard_keeps_good_programs_passing(
    executor: Executor, language: str
) -> None:
    good = _EXIT_GOOD[language]
    assert await judge(executor, good, _exit_suite(language), language=language) == [AC]


async def test_the_tests_end_marker_stays_out_of_the_reward(
    executor: Executor, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Go tests pass by printing the worker's secret marker: no RewardEvent may carry it."""
    marker_file = tmp_path_factory.getbasetemp() / "executor-cache" / "tests-end-marker"
    marker = marker_file.read_text(encoding="ascii")
    event = await executor.run(
        Completion(
            sample_id="s", language="go", code=_EXIT_GOOD["go"], tests=_GO_ADD_SUITE, limits=LIMITS
        )
    )
    assert event.verdict is AC
    assert "init" in event.stderr_tail
    assert marker not in event.stderr_tail + event.stdout_tail + event.message


async def test_a_stdin_program_may_still_exit_itself(executor: Executor) -> None:
    """Only assert suites are guarded: a stdin/stdout program may end with exit(0)."""
    code = '#include <stdio.h>\n#include <stdlib.h>\nint main(void) { puts("7"); exit(0); }\n'
    assert await judge(executor, code, IoSuite(inputs=[""], outputs=["7"]), language="c") == [AC]


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


@dataclass
class StalledCompiler:
    """Wraps the jail; its first ``stalls`` compilations block past a short backstop.

    The compiler is swapped for a ``sleep`` in the real jail, so the result is the
    jail's own wall-backstop timeout, as a compiler held up by the host gets.
    """

    inner: JailSandbox
    stalls: int

    @property
    def degraded(self) -> tuple[str, ...]:
        return self.inner.degraded

    async def execute(self, request: ExecRequest) -> ExecResult:
        if request.collect and self.stalls > 0:
            self.stalls -= 1
            stalled = replace(
                request, argv=("/bin/sleep", "30"), time_s=0.2, wall_s=0.4, wall_cap_s=0.4
            )
            result = await self.inner.execute(stalled)
            assert result.timed_out_by == "wall", result
            return result
        return await self.inner.execute(request)

    async def aclose(self) -> None:
        """The wrapped jail belongs to its fixture, which closes it."""


_C_PRINTS_7 = '#include <stdio.h>\nint main(void) { puts("7"); return 0; }\n'


async def test_a_compiler_stalled_by_the_host_is_retried_not_a_compile_error(
    jail: JailSandbox, tmp_path: Path
) -> None:
    config = ExecutorConfig(max_attempts=2, compile_cache_dir=tmp_path)
    stalled = StalledCompiler(jail, stalls=1)
    completion = Completion(
        sample_id="s", language="c", code=_C_PRINTS_7, tests=IoSuite(inputs=[""], outputs=["7"])
    )
    event = await Executor(config, stalled).run(completion)
    assert (event.verdict, event.attempt, stalled.stalls) == (AC, 2, 0)


async def test_a_compiler_stalled_on_every_attempt_is_a_sandbox_error_and_not_cached(
    jail: JailSandbox, tmp_path: Path
) -> None:
    config = ExecutorConfig(max_attempts=2, compile_cache_dir=tmp_path)
    stalled = StalledCompiler(jail, stalls=2)
    executor = Executor(config, stalled)
    completion = Completion(
        sample_id="s", language="c", code=_C_PRINTS_7, tests=IoSuite(inputs=[""], outputs=["7"])
    )
    event = await executor.run(completion)
    assert (event.verdict, event.attempt) == (Verdict.SANDBOX_ERROR, 2)
    assert "compiler wall backstop" in event.message, event.message
    # Nothing was cached for the source: once the host recovers, it compiles and passes.
    again = await executor.run(completion)
    assert (again.verdict, again.attempt) == (AC, 1)


SHIPPED = [
    pytest.param(HUMANEVAL, "def total(xs):\n    return sum(xs)\n", id="assert-alone"),
    pytest.param(
        IoSuite(inputs=[[1, 2], [3, 4]], outputs=[3, 7], fn_name="add"),
        "def add(a, b):\n    return a + b\n",
        id="call",
    ),
    pytest.param(
        IoSuite(inputs=["1 2\n", "3 4\n"], outputs=["3\n", "7\n"]),
        "print(sum(map(int, input().split())))\n",
        id="stdin-harness",
    ),
]


@pytest.mark.parametrize(("suite", "code"), SHIPPED)
async def test_the_harness_runs_the_worker_s_compile_of_the_program(
    executor: Executor, monkeypatch: pytest.MonkeyPatch, suite: TestSuite, code: str
) -> None:
    """The worker's compile travels with the program (HarnessSpec.program_code) and the
    harness runs it instead of compiling the source again: a compile of another program,
    slipped in here, is what gets judged."""
    assert {t.verdict for t in (await executor.run(one_test(code, suite))).tests} == {AC}
    other = code.replace("sum(", "-sum(").replace("a + b", "a - b")
    slipped = marshal.dumps(compile(other, "solution.py", "exec", dont_inherit=True))
    monkeypatch.setattr(
        "sandbox_workers.executor.check_program", lambda source: Checked(code=slipped)
    )
    event = await executor.run(one_test(code, suite))
    assert {t.verdict for t in event.tests} == {WA}, event.tests


async def test_a_program_whose_compile_warns_is_compiled_by_the_harness(
    executor: Executor,
) -> None:
    """A compile that warns is not shipped: the harness compiles the source itself, and
    the warning reaches the execution's stderr as it did before the worker's compile
    travelled (and as under `python solution.py`)."""
    code = "x = 1\nif x is 1:\n    pass\ndef total(xs):\n    return sum(xs)\n"
    assert check_program(code) == Checked()  # compiles, with a SyntaxWarning: no code
    assert check_program("print(1)\n").code is not None
    assert check_program("print(1\n").error is not None
    event = await executor.run(one_test(code, HUMANEVAL))
    assert [t.verdict for t in event.tests] == [AC], event.tests
    assert "solution.py:2: SyntaxWarning" in event.stderr_tail, event.stderr_tail
