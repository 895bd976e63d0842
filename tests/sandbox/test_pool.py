"""Warm pools: a zygote's execution must be indistinguishable from a cold one, and isolated.

Programs run twice, through a cold jail and through a warm pool, and what they
report (exit status, signal, stdout, stderr, files) must be the same. Then the
pool's own guarantees: what one execution leaves in memory never reaches the
next, zygotes are reused, retired, replaced and stopped, and requests fall back
to the cold path whenever the pool cannot serve them.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import marshal
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox, build
from sandbox_workers.judging.harness import _harness_source, kept_harness
from sandbox_workers.languages.python import _BOOTSTRAP_COMPILED
from sandbox_workers.pool import PoolConfig, pooled_command, shadowed_modules
from sandbox_workers.pool.zygote import _RequestHead
from sandbox_workers.sandbox import ExecRequest, ExecResult
from tests.sandbox.jails import ENV, PYTHON, py, strict_sandbox


@pytest.fixture
async def fresh_pool() -> AsyncIterator[JailSandbox]:
    """A pool of one zygote, for tests that count or kill zygotes."""
    sandbox = strict_sandbox(PoolConfig(size=1, prewarm=1.0, max_uses=3))
    yield sandbox
    await sandbox.aclose()


def observed(result: ExecResult) -> tuple[Any, ...]:
    """Everything about a run that a program decides (not timings or memory)."""
    return (
        result.exit_code,
        result.signal,
        result.stdout,
        result.stderr,
        result.timed_out,
        result.memory_exceeded,
        result.output_exceeded,
        dict(result.files),
    )


# ---------------------------------------------------------------------- recognising requests


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((PYTHON, "-S", "-B", "-c", "x", "a"), (("-S", "-B"), "x", ("a",))),
        ((PYTHON, "-ISc", "x"), (("-IS",), "x", ())),
        ((PYTHON, "-cprint(1)", "a", "-c"), ((), "print(1)", ("a", "-c"))),
        (
            (PYTHON, "-W", "error", "-X", "utf8", "-c", "x"),
            (("-W", "error", "-X", "utf8"), "x", ()),
        ),
        ((PYTHON, "-Xint_max_str_digits=0", "-c", "x"), (("-Xint_max_str_digits=0",), "x", ())),
    ],
)
def test_pooled_commands_are_recognised(argv: tuple[str, ...], expected: tuple[Any, ...]) -> None:
    command = pooled_command(ExecRequest(argv=argv, env={"A": "1"}), {PYTHON})
    assert command is not None
    assert (command.profile.options, command.code, command.args) == expected
    assert command.profile.env == (("A", "1"),)


@pytest.mark.parametrize(
    "argv",
    [
        (PYTHON, "-S", "main.py"),  # a script: runs cold
        (PYTHON, "-m", "json.tool"),
        (PYTHON, "-i", "-c", "x"),  # interactive after the command
        (PYTHON, "-v", "-c", "x"),  # prints while starting
        (PYTHON, "-X", "importtime", "-c", "x"),
        (PYTHON, "-X", "dev", "-c", "x"),  # installs faulthandler
        (PYTHON, "-c"),
        ("/usr/bin/python3", "-c", "x"),  # not the pooled interpreter
        ("/bin/true",),
    ],
)
def test_other_requests_run_cold(argv: tuple[str, ...]) -> None:
    assert pooled_command(ExecRequest(argv=argv), {PYTHON}) is None


def test_work_dir_files_that_shadow_modules() -> None:
    names = ["json.py", "harness.py", "pkg/__init__.py", "data.txt", "fast.cpython-311.so"]
    assert shadowed_modules(names) == ["fast.cpython-311", "harness", "json", "pkg"]


def test_pool_config_is_validated() -> None:
    assert PoolConfig(size=4, prewarm=0.5).prewarm_count == 2
    for bad in ({"size": 0}, {"prewarm": 1.5}, {"max_uses": 0}):
        with pytest.raises(ValueError):
            PoolConfig(**bad)


@pytest.mark.usefixtures("cold")  # skips where the strict jail cannot run
def test_request_layout_matches_the_c_library() -> None:
    library = ctypes.CDLL(str(build(JailConfig().bin_dir).library))
    library.rbjail_struct_size.restype = ctypes.c_size_t
    library.rbjail_struct_size.argtypes = (ctypes.c_char_p,)
    assert ctypes.sizeof(_RequestHead) == library.rbjail_struct_size(b"pool_request")


# ---------------------------------------------------------------------- same as cold

SAME_AS_COLD = {
    "exception": "def f():\n    raise ValueError('boom')\nf()",
    "syntax error": "x = (",
    "exit status": "import sys; print('out'); sys.exit(3)",
    "exit message": "import sys; sys.exit('bad input')",
    "exit none": "raise SystemExit",
    "exit huge": "raise SystemExit(2**70)",
    "keyboard interrupt": "import os, signal; os.kill(os.getpid(), signal.SIGINT)",
    "killed by a signal": "import os, signal; print('x', flush=True); os.kill(os.getpid(), 9)",
    "segfault": "import ctypes; ctypes.string_at(0)",
    "atexit and threads": (
        "import atexit, threading, time\n"
        "atexit.register(print, 'atexit ran')\n"
        "def late():\n    time.sleep(0.05); print('thread done')\n"
        "threading.Thread(target=late).start()\n"
        "print('main done')"
    ),
    "buffered file flushed at exit": "f = open('out.txt', 'w'); f.write('kept')",
    "finaliser at exit": (
        "class Bye:\n    def __del__(self): print('finalised')\nkeep = Bye()\nprint('end')"
    ),
    "excepthook": (
        "import sys\n"
        "sys.excepthook = lambda t, v, tb: print('hooked', t.__name__, file=sys.stderr)\n"
        "raise KeyError('k')"
    ),
    "chained exception": (
        "try:\n    1/0\nexcept ZeroDivisionError as e:\n    raise RuntimeError('x') from e"
    ),
    "stdout closed": "import sys, os; os.close(1); print('lost')",
    "interpreter state": (
        "import sys, os, json, signal, threading\n"
        "print(json.dumps({\n"
        " 'argv': sys.argv, 'orig': sys.orig_argv[1:], 'path0': sys.path[0],\n"
        " 'flags': [sys.flags.no_site, sys.flags.dont_write_bytecode, sys.flags.isolated],\n"
        " 'pid': os.getpid(), 'ppid': os.getppid(), 'sid': os.getsid(0), 'cwd': os.getcwd(),\n"
        " 'cmdline': open('/proc/self/cmdline', 'rb').read().decode(),\n"
        " 'globals': sorted(globals()), 'name': __name__, 'env': dict(os.environ),\n"
        " 'hash': hash('abc'), 'umask': os.umask(0o22),\n"
        " 'signals': [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGPIPE,\n"
        "             signal.SIGCHLD, signal.SIGTERM, signal.SIGXFSZ)],\n"
        " 'stdio': [(s.encoding, s.errors, s.line_buffering, s.isatty(), s.name)\n"
        "           for s in (sys.stdin, sys.stdout, sys.stderr)],\n"
        " 'threads': [t.name for t in threading.enumerate()],\n"
        " 'environ': open('/proc/self/environ', 'rb').read().decode(),\n"
        " 'recursion': sys.getrecursionlimit(), 'maxdigits': sys.get_int_max_str_digits(),\n"
        "}))"
    ),
    "stdin": "import sys; data = sys.stdin.read(); print(len(data), data[:5])",
    "unicode": "print('h\\u00e9llo \\u2603'); import sys; print('\\u00e9rr', file=sys.stderr)",
    "future import": (
        "from __future__ import annotations\n"
        "def f(x: Undefined) -> None: pass\n"
        "print(f.__annotations__)"
    ),
    "time limit": "while True: pass",
    "output cap": "while True: print('y' * 1000)",
}


@pytest.mark.sandbox
@pytest.mark.parametrize("name", list(SAME_AS_COLD))
async def test_a_warm_run_is_indistinguishable_from_a_cold_one(
    cold: JailSandbox, warm: JailSandbox, name: str
) -> None:
    code = SAME_AS_COLD[name]
    fields: dict[str, Any] = {"time_s": 0.5, "output_bytes": 1 << 16, "collect": ("*.txt",)}
    args = ("arg one", "-x")
    if name == "stdin":
        fields["stdin"] = b"hello stdin\n"
    if name == "interpreter state":
        fields["env"] = {**ENV, "PYTHONINTMAXSTRDIGITS": "0"}
    served = warm.pool_stats.served if warm.pool_stats else 0
    cold_result = await cold.execute(py(code, *args, **fields))
    warm_result = await warm.execute(py(code, *args, **fields))
    assert warm.pool_stats is not None and warm.pool_stats.served == served + 1
    assert observed(warm_result) == observed(cold_result)


@pytest.mark.sandbox
@pytest.mark.parametrize("options", [("-I", "-S"), ("-S", "-u", "-O"), ("-E", "-s", "-b")])
async def test_interpreter_options_are_the_zygotes_own(
    cold: JailSandbox, warm: JailSandbox, options: tuple[str, ...]
) -> None:
    code = (
        "import sys, json; print(json.dumps([list(sys.flags), sys.path[0] if sys.path else None,"
        " sys.stdout.write_through, __debug__]))"
    )
    cold_result = await cold.execute(py(code, options=options))
    warm_result = await warm.execute(py(code, options=options))
    assert cold_result.ok, cold_result
    assert warm_result.stdout == cold_result.stdout


@pytest.mark.sandbox
async def test_recursion_depth_is_within_a_few_frames_of_cold(
    cold: JailSandbox, warm: JailSandbox
) -> None:
    code = (
        "import sys\n"
        "def depth(n=1):\n"
        "    try: return depth(n + 1)\n"
        "    except RecursionError: return n\n"
        "print(depth())"
    )
    cold_depth = int((await cold.execute(py(code))).stdout)
    warm_depth = int((await warm.execute(py(code))).stdout)
    # The program runs at the zygote's module level: one frame (and the exec) deeper.
    assert cold_depth - 5 <= warm_depth <= cold_depth


# ---------------------------------------------------------------------- isolation


@pytest.mark.sandbox
async def test_one_execution_leaves_nothing_in_the_next_ones_memory(
    fresh_pool: JailSandbox,
) -> None:
    secret = f"rbsecret-{uuid.uuid4().hex}"
    plant = (
        "import json, sys\n"
        "json.PLANTED = sys.argv[1]\n"  # in a module the zygote preloaded
        "kept = [sys.argv[1] * 3 for _ in range(1000)]\n"
        "print('planted')"
    )
    look = "import json; print(hasattr(json, 'PLANTED'))"
    for _ in range(2):
        assert (await fresh_pool.execute(py(plant, secret))).stdout == b"planted\n"
        assert (await fresh_pool.execute(py(look))).stdout == b"False\n"
    # What every later execution inherits is the zygote's memory: the secret was
    # never in it (the zygote hands requests on unread).
    [zygote] = _zygote_pids(fresh_pool)
    assert secret.encode() not in _writable_memory(zygote)


@pytest.mark.sandbox
async def test_pid_1_leaves_nothing_in_the_zygotes_memory(fresh_pool: JailSandbox) -> None:
    """Pid 1 runs in the zygote's memory (CLONE_VM): its stack, which held the
    execution's result line, is emptied before a later program could inherit it."""
    result = await fresh_pool.execute(py("import sys; sys.exit(77)"))
    assert result.exit_code == 77
    [zygote] = _zygote_pids(fresh_pool)
    assert b"result exit=77 signal=0" not in _writable_memory(zygote)


def _writable_memory(pid: int) -> bytes:
    chunks = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("rw"):
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(lo)
                chunks.append(mem.read(hi - lo))
            except OSError:
                continue
    return b"".join(chunks)


@pytest.mark.sandbox
async def test_work_dir_files_shadow_preloaded_modules(
    cold: JailSandbox, warm: JailSandbox
) -> None:
    request = py("import json; print(json.VERSION)", files={"json.py": b"VERSION = 'mine'\n"})
    assert (await cold.execute(request)).stdout == b"mine\n"
    assert (await warm.execute(request)).stdout == b"mine\n"


@pytest.mark.sandbox
async def test_each_execution_gets_its_own_limits(warm: JailSandbox) -> None:
    memory = await warm.execute(py("x = bytearray(200 << 20)", memory_mb=64, time_s=10))
    assert memory.memory_exceeded or memory.exit_code == 1  # OOM kill or MemoryError
    roomy = await warm.execute(py("x = bytearray(200 << 20); print('ok')", memory_mb=400))
    assert roomy.ok and roomy.stdout == b"ok\n"
    busy = await warm.execute(py("while True: pass", time_s=0.3))
    assert busy.timed_out_by == "cpu" and 300 <= busy.cpu_ms < 1000
    slow = await warm.execute(py("import time; time.sleep(5)", time_s=0.3, wall_s=0.6))
    assert slow.timed_out_by == "wall" and 600 <= slow.wall_ms < 2000


# ---------------------------------------------------------------------- the pool itself


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _zygote_pids(sandbox: JailSandbox) -> list[int]:
    """The resident python processes: the zygotes themselves."""
    found = []
    for pid in sandbox.resident_pids():
        try:
            if Path(f"/proc/{pid}/exe").resolve() == Path(PYTHON).resolve():
                found.append(pid)
        except OSError:
            continue
    return found


@pytest.mark.sandbox
async def test_zygotes_are_reused_then_retired(fresh_pool: JailSandbox) -> None:
    for i in range(7):
        result = await fresh_pool.execute(py(f"print({i})"))
        assert result.stdout == f"{i}\n".encode()
    stats = fresh_pool.pool_stats
    assert stats is not None
    assert stats.served == 7 and stats.cold == 0
    assert stats.recycled == 2  # max_uses=3: after the 3rd and the 6th execution
    await asyncio.sleep(0)
    assert stats.started >= 3


@pytest.mark.sandbox
async def test_a_dead_zygote_is_replaced(fresh_pool: JailSandbox) -> None:
    assert (await fresh_pool.execute(py("print(1)"))).ok
    [zygote] = _zygote_pids(fresh_pool)
    os.kill(zygote, signal.SIGKILL)
    # The request that finds it dead still runs (cold, or in a replacement).
    assert (await fresh_pool.execute(py("print(2)"))).stdout == b"2\n"
    for _ in range(200):
        if _zygote_pids(fresh_pool) and _zygote_pids(fresh_pool) != [zygote]:
            break
        await asyncio.sleep(0.02)
    served = fresh_pool.pool_stats.served if fresh_pool.pool_stats else 0
    assert (await fresh_pool.execute(py("print(3)"))).stdout == b"3\n"
    assert fresh_pool.pool_stats is not None
    assert fresh_pool.pool_stats.discarded >= 1
    assert fresh_pool.pool_stats.served == served + 1


@pytest.mark.sandbox
async def test_an_exhausted_pool_falls_back_to_cold(fresh_pool: JailSandbox) -> None:
    await fresh_pool.warm(py("pass"))
    results = await asyncio.gather(*(fresh_pool.execute(py(f"print({i})")) for i in range(4)))
    assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(4)]
    stats = fresh_pool.pool_stats
    assert stats is not None and stats.cold >= 1 and stats.served >= 1


@pytest.mark.sandbox
async def test_a_zygote_that_cannot_start_means_cold_runs() -> None:
    # /bin/true is "the pooled interpreter" here: its zygote exits at once.
    sandbox = strict_sandbox(PoolConfig(size=1, interpreters=("/bin/true",)))
    try:
        result = await sandbox.execute(ExecRequest(argv=("/bin/true", "-c", "x")))
        assert result.ok
        assert sandbox.pool_stats is not None
        assert sandbox.pool_stats.start_failures == 1 and sandbox.pool_stats.cold == 1
    finally:
        await sandbox.aclose()


@pytest.mark.sandbox
async def test_a_timed_out_execution_does_not_cost_the_zygote(fresh_pool: JailSandbox) -> None:
    assert (await fresh_pool.execute(py("while True: pass", time_s=0.3))).timed_out
    assert (await fresh_pool.execute(py("print('next')"))).stdout == b"next\n"
    stats = fresh_pool.pool_stats
    assert stats is not None and stats.served == 2 and stats.discarded == 0


def _instance_dirs() -> set[Path]:
    """This process's cgroup instance directories (``w<pid>-<n>``), in every hierarchy."""
    own = f"w{os.getpid()}-*"
    return {p for p in Path("/sys/fs/cgroup").glob(f"*/**/rewardbus/{own}") if p.is_dir()}


@pytest.mark.sandbox
async def test_a_request_that_fails_to_start_does_not_keep_its_zygote(
    fresh_pool: JailSandbox,
) -> None:
    # An argv that cannot be encoded fails as it does cold, before anything runs.
    with pytest.raises(UnicodeEncodeError):
        await fresh_pool.execute(py("pass", "\udc80"))
    assert (await fresh_pool.execute(py("print(1)"))).stdout == b"1\n"
    stats = fresh_pool.pool_stats
    assert stats is not None and stats.cold == 0 and stats.discarded == 1
    assert len(_zygote_pids(fresh_pool)) == 1  # the failed one is gone, not kept busy


@pytest.mark.sandbox
async def test_closing_stops_every_zygote_and_removes_its_cgroups() -> None:
    before = _instance_dirs()
    sandbox = strict_sandbox(PoolConfig(size=2, prewarm=1.0))
    assert await sandbox.warm(py("pass")) == 2
    resident = sandbox.resident_pids()
    assert len(_zygote_pids(sandbox)) == 2
    await sandbox.aclose()
    for _ in range(200):
        if not any(_alive(pid) for pid in resident):
            break
        await asyncio.sleep(0.01)
    assert [pid for pid in resident if _alive(pid)] == []
    assert _instance_dirs() == before


@pytest.mark.sandbox
def test_the_pool_needs_namespaces_and_mounts() -> None:
    config = JailConfig(strict=False, disabled=frozenset({"mounts"}), pool=PoolConfig())
    try:
        sandbox = JailSandbox(config)
    except IsolationUnavailable as exc:
        pytest.fail(f"no jail on this host (see rewardbus doctor): {exc}")
    try:
        assert sandbox.pool_stats is None
    finally:
        sandbox.close()


@pytest.mark.sandbox
async def test_concurrent_warm_executions_keep_to_themselves(warm: JailSandbox) -> None:
    code = (
        "import os, sys, json\n"
        "open(sys.argv[1], 'w').write('x')\n"
        "print(json.dumps(sorted(os.listdir('.'))))"
    )
    results = await asyncio.gather(*(warm.execute(py(code, f"f{i}")) for i in range(6)))
    for i, result in enumerate(results):
        assert json.loads(result.stdout) == [f"f{i}"]


# ---------------------------------------------------------------------- kept code

# A kept module (PoolConfig.keep_code): its main() prints the name of the module
# it runs in (the zygote's own, or __main__) and the entry file's name, and sets
# the status. Its body counts its runs in the execution.
_KEPT_PROBE = (
    "import sys\n"
    "runs = getattr(sys, 'probe_runs', 0) + 1\n"
    "sys.probe_runs = runs\n"
    "def main():\n"
    "    print(__name__, sys.argv[0], sys.probe_runs - runs)\n"
    "    return 3\n"
    "if __name__ == '__main__':\n"
    "    sys.exit(main())\n"
)


@pytest.mark.sandbox
async def test_a_zygote_runs_only_the_modules_it_keeps(tmp_path: Path) -> None:
    """An execution of a kept file's very bytes calls the main() of the module the
    zygote ran before forking, and exits with its result; any other file (one byte
    off) and any cold run load and run their own, to the same end."""
    kept = marshal.dumps(compile(_KEPT_PROBE, "probe.py", "exec"))
    other = marshal.dumps(compile(_KEPT_PROBE + "pass\n", "probe.py", "exec"))
    assert kept != other
    (tmp_path / "probe.marshal").write_bytes(kept)
    sandbox = strict_sandbox(
        PoolConfig(size=1, prewarm=1.0, keep_code=(tmp_path / "probe.marshal",))
    )
    cold = strict_sandbox(PoolConfig(enabled=False))
    try:
        for data, expected in (
            (kept, b"_rewardbus_kept_0 entry.marshal 0\n"),
            (other, b"__main__ entry.marshal 0\n"),
        ):
            request = py(_BOOTSTRAP_COMPILED, "entry.marshal", files={"entry.marshal": data})
            served = sandbox.pool_stats.served if sandbox.pool_stats else 0
            warm_result = await sandbox.execute(request)
            assert sandbox.pool_stats is not None and sandbox.pool_stats.served == served + 1
            assert (warm_result.exit_code, warm_result.stdout, warm_result.stderr) == (
                3,
                expected,
                b"",
            )
            cold_result = await cold.execute(request)
            assert (cold_result.exit_code, cold_result.stdout) == (
                3,
                b"__main__ entry.marshal 0\n",
            ), cold_result
    finally:
        sandbox.close()
        cold.close()


# Prints whether the code running is one the zygote compiled before forking (the
# frame that runs it is the zygote's module level), then fails like any program.
_PRECOMPILED_PROBE = (
    "import sys\n"
    "here, caller = sys._getframe(), sys._getframe().f_back\n"
    "made = caller.f_globals.get('_PRECOMPILED', {}) if caller else {}\n"
    "print(any(here.f_code is code for code in made.values()), sys.argv[1:])\n"
    "1 / 0\n"
)


@pytest.mark.sandbox
async def test_a_zygote_runs_the_commands_it_compiled_as_compiled_afresh() -> None:
    """An execution whose -c command the zygote compiled before forking
    (PoolConfig.precompile) runs that code object; any other command, and a
    command that does not compile, is compiled in the execution. Either way it
    ends as the same command run cold: output, status and traceback."""
    broken = "x = ("
    sandbox = strict_sandbox(
        PoolConfig(size=1, prewarm=1.0, precompile=(_PRECOMPILED_PROBE, broken))
    )
    cold = strict_sandbox(PoolConfig(enabled=False))
    try:
        for code, ran_precompiled in (
            (_PRECOMPILED_PROBE, True),
            (_PRECOMPILED_PROBE + "pass\n", False),
            (broken, False),
        ):
            request = py(code, "arg")
            served = sandbox.pool_stats.served if sandbox.pool_stats else 0
            warm_result = await sandbox.execute(request)
            assert sandbox.pool_stats is not None and sandbox.pool_stats.served == served + 1
            cold_result = await cold.execute(request)
            if code != broken:
                assert warm_result.stdout == f"{ran_precompiled} ['arg']\n".encode()
                assert cold_result.stdout == b"False ['arg']\n"
                assert warm_result.stderr.endswith(b"ZeroDivisionError: division by zero\n")
            assert (warm_result.exit_code, warm_result.stderr) == (
                cold_result.exit_code,
                cold_result.stderr,
            )
            assert warm_result.exit_code == 1
    finally:
        sandbox.close()
        cold.close()


def test_the_kept_harness_is_the_one_executions_get(tmp_path: Path) -> None:
    """What zygotes keep is byte for byte the harness the executor writes (else no
    execution would find it), saved once under its digest."""
    path = kept_harness(tmp_path)
    assert path.read_bytes() == _harness_source("python")
    assert kept_harness(tmp_path) == path
    assert [p.name for p in (tmp_path / "kept").iterdir()] == [path.name]
