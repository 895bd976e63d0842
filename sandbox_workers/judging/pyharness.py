"""In-sandbox harness for Python function-call and assert suites.

This file is copied into the jail and run there by the sandbox's Python (stdlib
only); the worker never imports it. It runs every test of one completion in one
execution, each test in a forked child so that tests cannot see each other's
module state, and so that ``sys.exit``, ``os._exit``, a crash, a hang or a
runaway allocation ends only that test.

Protocol (the worker side is :mod:`sandbox_workers.judging.harness`):

- ``spec.json``: ``mode`` (``"call"`` or ``"assert"``), ``source`` (file name
  of the program), ``time_s`` and ``memory_mb`` per test, ``tests`` (call: the
  argument list of each call; assert: each case's code, or null for the single
  ``check(entry_point)`` test), ``fn_name``, ``setup`` (assert: test code run
  after the program), ``entry_point``.
- stdin: one random marker per test (32 hex digits and a newline).
- stdout: after test *i* has finished and its processes are gone, one line
  ``<marker i> <json record>``.

Why the markers cannot be forged by the program: the parent reads marker *i*
from stdin only after child *i* is dead, so no child ever holds its own marker
in memory; each child replaces its stdin with /dev/null before any program code
runs; and the parent makes itself non-dumpable, which keeps other processes of
the same uid out of ``/proc/<parent>/fd/0``. The worker takes the first record
per marker, so a later test cannot overwrite an earlier one.

What it cannot prevent: code that rewrites the interpreter inside its own child
(patching ``json`` or the harness's functions) can fake the result of its own
*assert* test, as in any in-process harness. Function-call results are compared
outside the sandbox, against values the program never sees.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

MARKER_BYTES = 33
_MESSAGE_LIMIT = 300
Record = dict[str, Any]


class _Deadline(BaseException):
    """Raised in the parent by SIGALRM when the running test's time is up."""


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    raise _Deadline


def main() -> int:
    """Run every test of spec.json; one record line per test on stdout."""
    _make_undumpable()
    with open("spec.json", encoding="utf-8") as handle:
        spec: dict[str, Any] = json.load(handle)
    jobs = _jobs(spec)
    signal.signal(signal.SIGALRM, _on_alarm)
    budget_s = float(spec["budget_s"])
    for job in jobs:
        if isinstance(job, dict):
            record = job
        elif budget_s <= 0.001:
            record = {"verdict": "time_limit", "message": "not run: total time limit reached"}
        else:
            time_s = min(float(spec["time_s"]), budget_s)
            record = _run_isolated(job, time_s, int(spec["memory_mb"]))
            budget_s -= record["wall_ms"] / 1000
        marker = _read_marker()
        if marker is None:
            return 2
        os.write(1, b"\n" + marker + b" " + json.dumps(record).encode() + b"\n")
        if spec["stop_on_failure"] and record["verdict"] not in ("accepted", "returned"):
            break
    return 0


def _jobs(spec: dict[str, Any]) -> list[Callable[[], Record] | Record]:
    """One callable per test, or a ready record when the test cannot run at all."""
    with open(spec["source"], encoding="utf-8") as handle:
        source = handle.read()
    tests: list[Any] = spec["tests"]
    try:
        program = compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError) as exc:
        failed = {"verdict": "compile_error", "message": _describe(exc)}
        return [failed for _ in tests]
    if spec["mode"] == "call":
        name: str = spec["fn_name"]
        return [_bind_call(program, name, args) for args in tests]
    try:
        setup = compile(spec.get("setup") or "", "tests.py", "exec")
        cases = [
            None if case is None else compile(case, f"case{i}", "exec")
            for i, case in enumerate(tests)
        ]
    except (SyntaxError, ValueError) as exc:
        broken = {
            "verdict": "sandbox_error",
            "message": "test code does not compile: " + _describe(exc),
        }
        return [broken for _ in tests]
    entry: str | None = spec.get("entry_point")
    return [_bind_assert(program, setup, case, entry) for case in cases]


def _bind_call(program: CodeType, name: str, args: Any) -> Callable[[], Record]:
    return lambda: _call(program, name, args)


def _bind_assert(
    program: CodeType, setup: CodeType, case: CodeType | None, entry: str | None
) -> Callable[[], Record]:
    return lambda: _check(program, setup, case, entry)


# --- in the parent -----------------------------------------------------------


def _run_isolated(job: Callable[[], Record], time_s: float, memory_mb: int) -> Record:
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(job, write_fd, memory_mb)
    os.close(write_fd)
    # Both sides set the group, so a kill right after fork cannot miss it.
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    data, status, usage, timed_out = _wait(pid, read_fd, time_s)
    wall_ms = (time.monotonic() - started) * 1000
    _kill(pid)
    os.close(read_fd)
    record = _record(data, status, timed_out)
    record["wall_ms"] = round(wall_ms, 3)
    if usage is not None:
        record["cpu_ms"] = round((usage.ru_utime + usage.ru_stime) * 1000, 3)
        record["peak_memory_kb"] = usage.ru_maxrss
    return record


def _wait(
    pid: int, read_fd: int, time_s: float
) -> tuple[bytes, int | None, resource.struct_rusage | None, bool]:
    chunks: list[bytes] = []
    status: int | None = None
    usage: resource.struct_rusage | None = None
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, time_s)
            while chunk := os.read(read_fd, 65536):
                chunks.append(chunk)
            _, status, usage = os.wait4(pid, 0)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Deadline:
        pass
    timed_out = status is None
    if timed_out:
        _kill(pid)
        try:
            _, status, usage = os.wait4(pid, 0)
        except ChildProcessError:
            # The alarm landed between the reap and the assignment.
            status = None
    return b"".join(chunks), status, usage, timed_out


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def _record(data: bytes, status: int | None, timed_out: bool) -> Record:
    if timed_out:
        return {"verdict": "time_limit", "message": "time limit exceeded"}
    try:
        record: Record = json.loads(data)
    except ValueError:
        record = {}
    if isinstance(record, dict) and "verdict" in record:
        return record
    # No record: the test ended the process itself (os._exit, a signal).
    if status is not None and os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return {"verdict": "runtime_error", "message": f"killed by signal {_signal_name(number)}"}
    code = os.waitstatus_to_exitcode(status) if status is not None else None
    return {
        "verdict": "runtime_error",
        "message": f"exited with status {code} before the test finished",
    }


def _read_marker() -> bytes | None:
    data = b""
    while len(data) < MARKER_BYTES:
        chunk = os.read(0, MARKER_BYTES - len(data))
        if not chunk:
            return None
        data += chunk
    return data.strip()


def _make_undumpable() -> None:
    # PR_SET_DUMPABLE(0): /proc/<this pid>/fd becomes unreadable to the
    # children, which run the program under the same uid.
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


# --- in the child ------------------------------------------------------------


def _child(job: Callable[[], Record], write_fd: int, memory_mb: int) -> None:
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        _limit_memory(memory_mb)
        record = _guarded(job)
        payload = _encode(record)
    except BaseException as exc:  # noqa: BLE001 - the child must always report
        payload = json.dumps({"verdict": "runtime_error", "message": _describe(exc)}).encode()
    _write_all(write_fd, payload)
    for stream in (sys.stdout, sys.stderr):
        # The program may have closed or replaced it.
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(0)


def _limit_memory(memory_mb: int) -> None:
    # An address-space limit turns exhaustion into MemoryError inside the test
    # (a clean memory_limit verdict) rather than an OOM kill of the whole run.
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = memory_mb * 1024 * 1024
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft == resource.RLIM_INFINITY or wanted < soft:
        resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))


def _guarded(job: Callable[[], Record]) -> Record:
    try:
        return job()
    except _TestFailed as failed:
        return {"verdict": "wrong_answer", "message": failed.message}
    except MemoryError:
        return {"verdict": "memory_limit", "message": "MemoryError"}
    except SystemExit as exc:
        # Exiting is not passing: a test passes only by reaching its end.
        return {"verdict": "runtime_error", "message": f"SystemExit({exc.code!r}) raised"}
    except BaseException as exc:  # noqa: BLE001 - any other exception is the program's fault
        return {"verdict": "runtime_error", "message": _describe(exc)}


class _TestFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _namespace() -> dict[str, Any]:
    # Not "__main__": a program's `if __name__ == "__main__":` block (reading
    # stdin, printing a demo) must not run in a function-call test.
    return {"__name__": "solution", "__builtins__": builtins}


def _call(program: CodeType, name: str, args: Any) -> Record:
    namespace = _namespace()
    exec(program, namespace)  # noqa: S102 - running the program is the point (inside the jail)
    function = namespace.get(name)
    if function is None and "Solution" in namespace:
        # LeetCode style: `class Solution: def twoSum(self, ...)`.
        function = getattr(namespace["Solution"](), name, None)
    if not callable(function):
        return {"verdict": "runtime_error", "message": f"function {name!r} is not defined"}
    value = function(*args) if isinstance(args, list) else function(args)
    try:
        text = json.dumps(value, default=_jsonable)
    except (TypeError, ValueError, RecursionError):
        return {"verdict": "returned", "repr": _short(repr(value))}
    return {"verdict": "returned", "value_json": text}


def _check(program: CodeType, setup: CodeType, case: CodeType | None, entry: str | None) -> Record:
    namespace = _namespace()
    exec(program, namespace)  # noqa: S102 - running the program is the point (inside the jail)
    exec(setup, namespace)  # noqa: S102 - the suite's test code
    candidate = None
    if entry is not None:
        candidate = namespace.get(entry)
        if candidate is None:
            return {"verdict": "runtime_error", "message": f"{entry!r} is not defined"}
        namespace["candidate"] = candidate
    try:
        if case is not None:
            exec(case, namespace)  # noqa: S102 - the suite's test case
        elif entry is not None:
            namespace["check"](candidate)
    except AssertionError as exc:
        raise _TestFailed(_describe(exc)) from None
    return {"verdict": "accepted"}


def _jsonable(value: Any) -> Any:
    # Expected values are JSON, which has no sets: a set equals no expected value
    # (as in Python, where {1, 2} != [1, 2]), so it is not turned into a list.
    raise TypeError(type(value).__name__)


def _encode(record: Record) -> bytes:
    value_json = record.pop("value_json", None)
    text = json.dumps(record)
    if value_json is not None:
        # Splice the already-serialised value instead of parsing it back.
        text = text[:-1] + ', "value": ' + value_json + "}"
    return text.encode()


def _write_all(fd: int, data: bytes) -> None:
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _describe(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except BaseException:  # noqa: BLE001 - a program's __str__ may raise
        text = type(exc).__name__
    return _short(text)


def _short(text: str) -> str:
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


if __name__ == "__main__":
    sys.exit(main())
