"""Python stdin/stdout tests run by the harness (a fork per test): as a fresh interpreter runs them.

A suite of one test runs as an execution of its own instead; the failure tests
run both shapes and expect the same verdicts.

Each test's program runs as ``python solution.py`` would: ``__main__``, its own
standard streams, exit statuses and tracebacks as the interpreter makes them,
non-daemon threads joined, ``atexit`` run. Every limit holds per test, and
nothing a test leaves (files, processes) reaches the next one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_workers import Executor, ExecutorConfig
from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox
from sandbox_workers.pool import PoolConfig
from schemas import Completion, IoSuite, Limits, RewardEvent, Verdict
from tests.sandbox.test_languages import AC, MLE, OLE, RE, TLE, WA

pytestmark = pytest.mark.sandbox

LIMITS = Limits(time_s=1.0, total_time_s=30.0, memory_mb=64, output_kb=16)


@pytest.fixture(scope="module", params=["cold", "warm"])
def executor(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Executor]:
    pool = PoolConfig(enabled=request.param == "warm", size=1, prewarm=1.0)
    try:
        sandbox = JailSandbox(JailConfig(pool=pool))
    except IsolationUnavailable as exc:
        pytest.fail(f"this host cannot run the strict jail (see rewardbus doctor): {exc}")
    cache = tmp_path_factory.mktemp("cache")
    yield Executor(ExecutorConfig(compile_cache_dir=cache), sandbox)
    sandbox.close()


async def judge(
    executor: Executor, code: str, inputs: list[str], outputs: list[str], **suite: object
) -> RewardEvent:
    tests = IoSuite(inputs=inputs, outputs=outputs, **suite)  # type: ignore[arg-type]
    completion = Completion(sample_id="s", code=code, tests=tests, limits=LIMITS)
    return await executor.run(completion)


def verdicts(event: RewardEvent) -> list[Verdict]:
    return [t.verdict for t in event.tests]


@pytest.mark.parametrize(
    "code",
    [
        "print(sum(map(int, input().split())))",
        "import sys\nprint(sum(map(int, sys.stdin.read().split())))",
        "import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))",
        "print(sum(map(int, open(0).read().split())))",
        "import os\nprint(sum(map(int, os.read(0, 100).split())))",
        "import sys\nsys.stdout.write(str(sum(map(int, input().split()))))",
        "import sys\nsys.stdout.buffer.write(b'%d' % sum(map(int, input().split())))",
        "if __name__ == '__main__':\n    print(sum(map(int, input().split())))",
        "import sys\nprint(sum(map(int, input().split())))\nsys.exit(0)",
        "print(sum(map(int, input().split())))\nexit()",
        "import sys, __main__\nassert __file__ == 'solution.py' and sys.argv == ['solution.py']\n"
        "assert __main__.__dict__ is globals()\nprint(sum(map(int, input().split())))",
        # Deep recursion in a big-stack thread, the contest idiom: joined at exit.
        "import sys, threading\nsys.setrecursionlimit(10**6)\nthreading.stack_size(1 << 26)\n"
        "def down(n):\n    return 0 if n == 0 else 1 + down(n - 1)\n"
        "def main():\n    a, b = map(int, input().split())\n"
        "    print(a + b + down(50000) - 50000)\n"
        "threading.Thread(target=main).start()",
        "import atexit\na, b = map(int, input().split())\natexit.register(print, a + b)",
    ],
)
async def test_a_program_runs_as_a_fresh_interpreter_runs_it(executor: Executor, code: str) -> None:
    event = await judge(executor, code, ["2 3\n", "40 2\n"], ["5", "42"])
    assert verdicts(event) == [AC, AC], event.tests


@pytest.mark.parametrize(
    ("code", "verdict", "message"),
    [
        ("import sys\nsys.exit(3)", RE, "exit status 3"),
        ("import sys\nsys.exit('it went wrong')", RE, "exit status 1: it went wrong"),
        ("raise ValueError('no such thing')", RE, "ValueError: no such thing"),
        # Annotations are evaluated, as `python solution.py` evaluates them (the
        # harness's own `from __future__ import annotations` is not the program's).
        ("def f(x: Undefined):\n    pass\nprint(5)", RE, "name 'Undefined' is not defined"),
        ("import os\nos._exit(4)", RE, "exit status 4"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", RE, "SIGSEGV"),
        ("while True:\n    pass", TLE, "cpu limit"),
        ("import time\ntime.sleep(60)", TLE, "wall backstop"),
        ("x = bytearray(400 << 20)\nprint(len(x))", MLE, ""),
        ("while True:\n    print('y' * 100)", OLE, "output limit"),
        ("import sys\nwhile True:\n    sys.stderr.write('e' * 100)", OLE, "output limit"),
        ("print(6)", WA, "expected '5', got '6'"),
    ],
)
@pytest.mark.parametrize("count", [1, 2], ids=["alone", "harness"])
async def test_each_way_a_test_can_fail_is_its_verdict(
    executor: Executor, code: str, verdict: Verdict, message: str, count: int
) -> None:
    """A single test is an execution of its own; two go through the harness: the same verdicts."""
    event = await judge(executor, code, ["2 3\n"] * count, ["5"] * count)
    assert verdicts(event) == [verdict] * count, event.tests
    assert all(message in test.message for test in event.tests), event.tests


@pytest.mark.parametrize("count", [1, 2], ids=["alone", "harness"])
async def test_the_cpu_time_of_a_test_s_child_processes_is_its_own(
    executor: Executor, count: int
) -> None:
    forks = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"  # not even waited for: it counts while it runs
        "    while True:\n        pass\n"
        "time.sleep(5)\n"
    )
    event = await judge(executor, forks, ["1\n"] * count, ["1"] * count)
    assert verdicts(event) == [TLE] * count, event.tests
    assert all(test.message.startswith("cpu limit") for test in event.tests), event.tests


# Test 1 leaves everything it can; test 2 looks for it.
LEAVER = """
import os, sys, time
what = input()
if what == "leave":
    for path in ("/work/left", "/tmp/left", "/dev/shm/left"):
        open(path, "w").write("x")
    open("solution.py", "a").write("\\nraise SystemExit(9)\\n")
    os.chmod(".", 0o500)
    if os.fork() == 0:
        os.setsid()
        while True:
            open("/tmp/daemon", "a").write("x")
            time.sleep(0.01)
    time.sleep(0.05)
    print("left")
else:
    paths = ("/work/left", "/tmp/left", "/dev/shm/left", "/tmp/daemon")
    found = [p for p in paths if os.path.exists(p)]
    ours = (os.getpid(), os.getppid())

    def alive(pid):  # a killed process may stay a zombie until the jail's init reaps it
        try:
            return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in ours and alive(p)]
    mode = oct(os.stat(".").st_mode & 0o777)
    print(found, others, mode, open("solution.py").read().splitlines().count("raise SystemExit(9)"))
"""


async def test_nothing_a_test_leaves_reaches_the_next(executor: Executor) -> None:
    event = await judge(executor, LEAVER, ["leave\n", "look\n"], ["left", "[] [] 0o755 0"])
    assert verdicts(event) == [AC, AC], event.tests


async def test_big_suites_run_in_chunks_and_stop_at_the_first_failure(executor: Executor) -> None:
    code = "n = int(input())\nprint(-1 if n == 150 else 2 * n)"
    inputs = [f"{n}\n" for n in range(200)]
    outputs = [str(2 * n) for n in range(200)]
    every = await judge(executor, code, inputs, outputs)
    assert verdicts(every) == [AC] * 150 + [WA] + [AC] * 49
    stopped = await judge(executor, code, inputs, outputs, stop_on_first_failure=True)
    assert verdicts(stopped) == [AC] * 150 + [WA]
    assert every.tests[150].message == "expected '300', got '-1'"


async def test_a_program_that_kills_the_harness_fails_only_its_chunk(executor: Executor) -> None:
    """Test 2 kills the harness: the rest of its chunk (the first 8 tests) did not run and
    fails; the next chunk runs in an execution of its own."""
    code = (
        "import os, signal\nn = int(input())\n"
        "if n == 2:\n    os.kill(os.getppid(), signal.SIGKILL)\nprint(n)"
    )
    numbers = [str(n) for n in range(1, 13)]
    event = await judge(executor, code, [f"{n}\n" for n in numbers], numbers)
    got = verdicts(event)
    assert len(got) == 12 and got[0] is AC, event.tests
    assert all(v is not AC for v in got[1:8]), event.tests
    assert "not run: the execution ended" in event.tests[2].message
    assert got[8:] == [AC] * 4, event.tests


def test_the_harness_file_is_stdlib_only() -> None:
    harness = Path(__file__).parents[2] / "sandbox_workers" / "judging" / "pyharness.py"
    imports = [
        line for line in harness.read_text().splitlines() if line.startswith(("import ", "from "))
    ]
    assert all("sandbox_workers" not in line and "schemas" not in line for line in imports)
