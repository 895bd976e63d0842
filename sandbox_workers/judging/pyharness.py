"""In-sandbox harness for Python function-call, assert and stdin/stdout suites.

This file is copied into the jail and run there by the sandbox's Python (stdlib
only); the worker imports it only to compile assert suites (:func:`compile_suite`).
It runs every test of one completion in one execution, each test in a forked
child so that tests cannot see each other's module state, and so that
``sys.exit``, ``os._exit``, a crash, a hang or a runaway allocation ends only
that test. After each test every process the test left (one that escaped its
process group too) is killed, and the files it left in /work, /tmp and
/dev/shm are removed, so the next test starts as a new execution would.

A suite's only function-call or assert test (HumanEval's ``check``) runs in the
harness's own process instead (:func:`_alone`): there is no other test to keep
it from, and the jail ends the execution at the test's own limits. The fork of
the interpreter was ~2.3 ms of a warm HumanEval execution's ~7.4 ms of CPU.

A stdin test (``mode: "stdin"``) runs the program as ``__main__`` the way a
fresh ``python solution.py`` would (its own ``sys.stdin``, ``sys.stdout`` and
``sys.stderr`` on the test's input and two pipes, ``SystemExit`` and uncaught
exceptions turned into an exit status and a traceback, non-daemon threads
joined and ``atexit`` functions run at the end) and its record is what a jail
reports of an execution: exit status or signal, the limit that ended it, CPU
and wall time, peak memory, and the output (base64). The output is judged by the
worker, which never sends the expected outputs into the sandbox.

Protocol (:mod:`sandbox_workers.judging.protocol`, the worker side's structs):

- ``spec.json``: a ``HarnessSpec``, every key present (:data:`SPEC_KEYS`); this
  file defaults none of them. A spec without one of them is a protocol error,
  reported as a ``sandbox_error`` record for every test.
- stdin: one random marker per test (``marker_bytes``: hex digits and a newline).
- stdout: after test *i* has finished and its processes are gone, one line
  ``<marker i> <json record>`` (a ``HarnessRecord``).

Per test the parent enforces the CPU time of the test's child (all its
threads) and the wall-clock backstop, as the jail does for a whole execution:
it sleeps in poll() until the child writes, exits, or could at the earliest
have used up its CPU time (every usable CPU busy), then looks at the child's
CPU clock; a busy host stretches a test's wall time, not its CPU time. Time
the child's threads waited for a CPU (``/proc/<pid>/task/*/schedstat``) moves
the backstop back, up to ``wall_stretch`` times it.

Why the markers cannot be forged by the program: the parent reads marker *i*
from stdin only after child *i* is dead, so no child ever holds its own marker
in memory; each child replaces its stdin with /dev/null before any program code
runs; and the parent makes itself non-dumpable, which keeps other processes of
the same uid out of ``/proc/<parent>/fd/0``. The worker takes the first record
per marker, so a later test cannot overwrite an earlier one. A test run alone
could find its marker in the harness's memory and forge its own record, as a
child can through the pipe its record goes by; no test can forge another's.

Assert tests compare the program's values in the program's own process, so a value
whose ``__eq__`` always answers True (a class of the program's, a subclass of int)
would pass every ``assert f(x) == y``. The tests' single comparisons (``==``, ``!=``,
``in``, ``not in``, ``<``, ``<=``, ``>``, ``>=``) and subtractions are compiled to
calls of ``_compare``: plain data (builtin scalars, and builtin containers of them)
works as usual; for any other value the test fails when it also compares equal to a
value it cannot honestly equal (a fresh object, or the expected value at its place
changed; also inside a builtin list, tuple or dict), is ordered against NaN, or gives
the same difference whatever number is subtracted from it. A chained comparison
(``0 <= f(x) < n``) is guarded link by link when the operands after its second are
constants or names (evaluating those first changes nothing); other chains, and other
arithmetic, are left as written (a value whose ``-`` returns itself and whose ``abs()``
returns 0 still passes ``abs(f(x) - y) < 1e-6``). With an entry point
(HumanEval's ``check(candidate)``) the tests reach the program only through
``candidate``, so the builtin names they use (``abs``, ``len``, ``sum``) are compiled
to the real builtins: a program's own ``abs = lambda x: 0`` does not answer for them.

What it cannot prevent: code that rewrites the interpreter inside its own child
(patching ``json`` or the harness's functions) can fake the result of its own
*assert* test, as in any in-process harness. Function-call results are compared
outside the sandbox, against values the program never sees.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import io
import json
import marshal
import math
import operator
import os
import resource
import select
import signal
import sys
import time
import types
from collections.abc import Callable, Iterator
from types import CodeType
from typing import Any

# Every key of spec.json (the worker's HarnessSpec), all of them always there.
SPEC_KEYS = (
    "mode", "source", "count", "tests", "time_s", "memory_mb", "wall_factor",
    "wall_extra_s", "wall_stretch", "budget_s", "stop_on_failure", "marker_bytes",
    "fn_name", "setup", "entry_point", "compiled", "guard_names", "program_code",
    "output_bytes", "stderr_tail_bytes",
)  # fmt: skip
_MESSAGE_LIMIT = 300
# The shortest wait between two looks at a running test's CPU clock.
_CHECK_FLOOR_S = 0.002
# Past the backstop, how often a starved test's run-queue delays are looked at again.
_STARVED_CHECK_S = 0.02
# A test off the CPU for less than this did not wait for one long enough to matter.
_WAITED_WORTH_S = 0.01
# After a test's child exits, at most this many chunks are still read from its
# pipe (a descendant may hold it open and keep writing).
_DRAIN_CHUNKS = 256
# How long the processes a test left may take to exit once killed.
_LEFTOVER_WAIT_S = 1.0
# Where a test may leave files (besides what the worker put in /work).
_SCRATCH_DIRS = ("/tmp", "/dev/shm")  # noqa: S108 - the jail's own, emptied after each test
Record = dict[str, Any]
# A test, run with its limits: CPU seconds, the wall backstop and its cap.
Test = Callable[[float, float, float], Record]


def main() -> int:
    """Run every test of spec.json; one record line per test on stdout."""
    with open("spec.json", encoding="utf-8") as handle:
        spec: dict[str, Any] = json.load(handle)
    missing = [key for key in SPEC_KEYS if key not in spec]
    if missing:
        return _protocol_error("spec.json lacks " + ", ".join(missing))
    tests = _tests(spec)
    budget_s = float(spec["budget_s"])
    factor = float(spec["wall_factor"])
    extra_s = float(spec["wall_extra_s"])
    stretch = float(spec["wall_stretch"])
    marker_bytes = int(spec["marker_bytes"])
    if len(tests) == 1 and isinstance(tests[0], _Isolated) and budget_s > 0.001:
        return _alone(tests[0], min(float(spec["time_s"]), budget_s), marker_bytes)
    # Before any test's child exists (no program code has run yet); a test run alone
    # has no child of ours to keep out, and stays dumpable, as the jail started it.
    _set_dumpable(0)
    # A single test (HumanEval's check) leaves nothing any test of ours could see.
    given = _Given.now() if len(tests) > 1 else None
    ran = False
    for test in tests:
        if isinstance(test, dict):
            record = test
        elif budget_s <= 0.001:
            record = {"verdict": "time_limit", "message": "not run: total time limit reached"}
        else:
            if given is not None and ran:
                given.restore()  # what the test before this one left
            cpu_s = min(float(spec["time_s"]), budget_s)
            wall_s = max(factor * cpu_s, cpu_s + extra_s)
            record = test(cpu_s, wall_s, stretch * wall_s)
            ran = True
            # Its CPU time, or its wall time less its wait for a CPU (as the worker charges).
            waited_ms = record.get("waited_ms", 0.0)
            budget_s -= max(record.get("cpu_ms", 0.0), record["wall_ms"] - waited_ms) / 1000
        marker = _read_marker(marker_bytes)
        if marker is None:
            return 2
        os.write(1, b"\n" + marker + b" " + json.dumps(record).encode() + b"\n")
        if spec["stop_on_failure"] and _failed(record):
            break
    return 0


def _protocol_error(message: str) -> int:
    """A spec this harness cannot follow: every test's record says so (the worker's fault)."""
    record = json.dumps({"verdict": "sandbox_error", "message": _short(message)}).encode()
    for marker in sys.stdin.buffer.read().split():
        os.write(1, b"\n" + marker + b" " + record + b"\n")
    return 0


def _failed(record: Record) -> bool:
    if record["verdict"] == "exited":  # a stdin test: failed if it did not end cleanly
        return record["exit"] != 0 or record["limit"] is not None or record["oom"]
    return record["verdict"] not in ("accepted", "returned")


def _tests(spec: dict[str, Any]) -> list[Test | Record]:
    """One test per case, or a ready record when the test cannot run at all."""
    count = int(spec["count"])
    memory_mb = int(spec["memory_mb"])
    program_code: str | None = spec["program_code"]
    if program_code is not None:
        # The worker compiled the source as below, with this interpreter.
        with open(program_code, "rb") as handle:
            program = marshal.loads(handle.read())  # noqa: S302 - the worker's own output
    else:
        with open(spec["source"], encoding="utf-8") as handle:
            source = handle.read()
        try:
            # dont_inherit: not this file's `from __future__ import annotations`; the
            # program's annotations are evaluated as `python solution.py` evaluates them.
            program = compile(source, "solution.py", "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            failed = {"verdict": "compile_error", "message": _describe(exc)}
            return [failed for _ in range(count)]
    if spec["mode"] == "stdin":
        # Imported here, not at the top: only stdin tests use them, and a
        # function-call or assert execution must not pay for them.
        import binascii  # noqa: F401
        import traceback  # noqa: F401

        caps = (int(spec["output_bytes"]), int(spec["stderr_tail_bytes"]))
        return [_bind_stdin(program, text, caps) for text in spec["tests"]]
    if spec["mode"] == "call":
        name: str = spec["fn_name"]
        jobs = [_bind_call(program, name, args) for args in spec["tests"]]
    else:
        try:
            setup, cases = _assert_tests(spec)
        except (SyntaxError, ValueError) as exc:
            broken = {
                "verdict": "sandbox_error",
                "message": "test code does not compile: " + _describe(exc),
            }
            return [broken for _ in range(count)]
        entry: str | None = spec["entry_point"]
        jobs = [_bind_assert(program, setup, case, entry) for case in cases]
    return [_bind_isolated(job, memory_mb) for job in jobs]


def _assert_tests(spec: dict[str, Any]) -> tuple[CodeType, list[CodeType | None]]:
    """The suite's test code and cases, guarded: compiled by the worker, or here."""
    global _GUARD, _CHAIN, _BUILTINS  # the names the worker compiled the tests with
    compiled: str | None = spec["compiled"]
    if compiled is None:
        # HumanEval's shape reaches the program only through `candidate`: every builtin
        # name its tests use means the builtin, whatever the program bound to it.
        protect = spec["entry_point"] is not None
        return compile_suite(spec["setup"], spec["tests"], protect)
    _GUARD, _CHAIN, _BUILTINS = spec["guard_names"]
    with open(compiled, "rb") as handle:
        setup, cases = marshal.loads(handle.read())  # noqa: S302 - the worker's own output
    return setup, cases


class _Isolated:
    """A function-call or assert test: run in a forked child of its own, or, as a
    suite's only test, in the harness's own process (:func:`_alone`)."""

    __slots__ = ("job", "memory_mb")

    def __init__(self, job: Callable[[], Record], memory_mb: int) -> None:
        self.job, self.memory_mb = job, memory_mb

    def __call__(self, cpu_s: float, wall_s: float, cap_s: float) -> Record:
        return _run_isolated(self.job, cpu_s, wall_s, cap_s, self.memory_mb)


def _bind_isolated(job: Callable[[], Record], memory_mb: int) -> Test:
    return _Isolated(job, memory_mb)


def _bind_stdin(program: CodeType, text: str, caps: tuple[int, int]) -> Test:
    return lambda cpu_s, wall_s, cap_s: _run_stdin(program, text, (cpu_s, wall_s, cap_s), caps)


def _bind_call(program: CodeType, name: str, args: Any) -> Callable[[], Record]:
    return lambda: _call(program, name, args)


def _bind_assert(
    program: CodeType, setup: CodeType, case: CodeType | None, entry: str | None
) -> Callable[[], Record]:
    return lambda: _check(program, setup, case, entry)


# --- in the parent -----------------------------------------------------------


def _run_isolated(
    job: Callable[[], Record], cpu_s: float, wall_s: float, cap_s: float, memory_mb: int
) -> Record:
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(job, write_fd, memory_mb)
    os.close(write_fd)
    report = [_Stream(read_fd)]
    ended = _end(pid, report, cpu_s, (started, started + wall_s, started + cap_s))
    record = _record(report[0].data, ended.status, ended.limit, ended.cpu_ms, ended.wall_ms)
    record["wall_ms"] = round(ended.wall_ms, 3)
    record["waited_ms"] = round(ended.waited_s * 1000, 3)
    if ended.usage is not None:
        record["cpu_ms"] = round(ended.cpu_ms, 3)
        record["peak_memory_kb"] = ended.usage.ru_maxrss
    return record


def _run_stdin(
    program: CodeType, text: str, limits: tuple[float, float, float], caps: tuple[int, int]
) -> Record:
    """One stdin test: the program as __main__ on ``text``; its record as a jail's report.

    ``caps``: each stream's, and how much of the end of its stderr the record carries.
    """
    cpu_s, wall_s, cap_s = limits
    cap, stderr_tail = caps
    stdin = os.memfd_create("stdin", os.MFD_CLOEXEC)
    _write_all(stdin, text.encode("utf-8"))
    os.lseek(stdin, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        _stdin_child(program, (stdin, out_w, err_w))
    for fd in (stdin, out_w, err_w):
        os.close(fd)
    streams = [_Stream(out_r, cap), _Stream(err_r, cap)]
    ended = _end(pid, streams, cpu_s, (started, started + wall_s, started + cap_s))
    status = ended.status
    signum = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
    code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None
    usage = ended.usage
    return {
        "verdict": "exited",
        "exit": code,
        "signal": signum,
        "limit": ended.limit,
        # Killed, and not by us: the only SIGKILL a test gets from outside is the
        # OOM killer's (its child raised its own OOM score to be the one it picks).
        "oom": signum == signal.SIGKILL and ended.limit is None,
        "stdout": _b64(streams[0].data),
        "stderr": _b64(_tail(streams[1].data, stderr_tail)),
        "wall_ms": round(ended.wall_ms, 3),
        "waited_ms": round(ended.waited_s * 1000, 3),
        "cpu_ms": round(ended.cpu_ms, 3),
        "peak_memory_kb": usage.ru_maxrss if usage is not None else 0,
    }


def _alone(test: _Isolated, cpu_s: float, marker_bytes: int) -> int:
    """A suite's only function-call or assert test, run in this process; its record
    written, this process ends (``os._exit``: no thread of the program's is joined,
    no ``atexit`` of its run, as in a test's child).

    Its marker is read first and stdin replaced by /dev/null before the program runs,
    as a child's is. What a child adds for one test, the jail already gives: its
    limits (the worker sets the execution's to the test's own, see
    ``runner._harness``), a process of its own, the processes it leaves killed at
    its end. A test can forge its own record either way (a child holds the pipe
    its record goes through; here it could find the marker in memory), as the
    module docstring says; the record of another test it cannot, there is none.
    """
    marker = _read_marker(marker_bytes)
    if marker is None:
        return 2
    try:
        payload = _encode(_run_alone(test, cpu_s))
    except BaseException as exc:  # noqa: BLE001 - the test must always have a record
        payload = json.dumps({"verdict": "runtime_error", "message": _describe(exc)}).encode()
    for stream in (sys.stdout, sys.stderr):
        # The program's own output goes before the record. It may have closed or replaced it.
        with contextlib.suppress(BaseException):
            stream.flush()
    _write_all(1, b"\n" + marker + b" " + payload + b"\n")
    os._exit(0)


def _run_alone(test: _Isolated, cpu_s: float) -> Record:
    """The test's record, with its CPU time (every process of the test, as a child's
    is measured) and wall time; over ``cpu_s`` it is a time limit, as a child killed
    at its limit would be (the jail kills a test that runs on)."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    address_space = resource.getrlimit(resource.RLIMIT_AS)
    # No process of the test's exists yet: only this one's time so far is not the test's.
    started, spent_s = time.monotonic(), _own_cpu_s()
    try:
        _limit_memory(test.memory_mb)
        record = _guarded(test.job)
    finally:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, address_space)
    cpu_ms = (_own_cpu_s() + _others_cpu_s({"1", str(os.getpid())}) - spent_s) * 1000
    wall_ms = (time.monotonic() - started) * 1000
    if cpu_ms > cpu_s * 1000:
        record = _record(b"", None, "cpu", cpu_ms, wall_ms)
    record["wall_ms"] = round(wall_ms, 3)
    record["waited_ms"] = 0.0
    record["cpu_ms"] = round(cpu_ms, 3)
    record["peak_memory_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return record


def _tail(data: bytes, size: int) -> bytes:
    return data[max(len(data) - size, 0) :]


def _b64(data: bytes) -> str:
    import binascii  # stdin mode only; imported before the fork (see _tests)

    return binascii.b2a_base64(data, newline=False).decode("ascii")


class _Stream:
    """A test's pipe, read as it writes; past ``cap`` bytes the test is stopped."""

    __slots__ = ("cap", "chunks", "fd", "size")

    def __init__(self, fd: int, cap: int | None = None) -> None:
        self.fd = fd
        self.cap = cap
        self.chunks: list[bytes] = []
        self.size = 0

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)

    @property
    def over(self) -> bool:
        return self.cap is not None and self.size > self.cap

    def read(self) -> bool:
        """Read one chunk (kept up to the cap); False at end of file."""
        chunk = os.read(self.fd, 65536)
        if self.cap is not None and self.size + len(chunk) > self.cap:
            self.chunks.append(chunk[: max(self.cap - self.size, 0)])
        elif chunk:
            self.chunks.append(chunk)
        self.size += len(chunk)
        return bool(chunk)


class _Ended:
    """How a test's child ended: its wait status and usage, the limit that ended it.

    ``measured_ms``: the test's CPU time as last measured while it ran (its
    processes that were killed, not reaped, are in this and not in ``usage``).
    """

    __slots__ = ("limit", "measured_ms", "status", "usage", "waited_s", "wall_ms")

    def __init__(
        self,
        status: int | None,
        usage: resource.struct_rusage | None,
        limit: str | None,
        times: tuple[float, float, float],
    ) -> None:
        self.status, self.usage, self.limit = status, usage, limit
        self.wall_ms, self.waited_s, self.measured_ms = times

    @property
    def cpu_ms(self) -> float:
        usage = self.usage
        reaped = (usage.ru_utime + usage.ru_stime) * 1000 if usage is not None else 0.0
        return max(reaped, self.measured_ms)


def _end(
    pid: int, streams: list[_Stream], cpu_s: float, times: tuple[float, float, float]
) -> _Ended:
    """Wait for a test's child within its limits, then kill every process it left and reap it."""
    started, backstop, cap = times
    # Both sides set the group, so a kill right after fork cannot miss it.
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    limit, measured_s = _wait(pid, streams, cpu_s, (backstop, cap))
    # Before it is killed or reaped, while its schedstat is there; only when it
    # was off the CPU long enough for its wait to matter.
    waited_s = 0.0
    if time.monotonic() - started - _cpu_time(_cpu_clock(pid)) > _WAITED_WORTH_S:
        waited_s = _waited_s(pid)
    _kill(pid)
    status, usage = _reap(pid)
    _kill_leftovers()
    wall_ms = (time.monotonic() - started) * 1000
    for stream in streams:
        os.close(stream.fd)
    return _Ended(status, usage, limit, (wall_ms, waited_s, measured_s * 1000))


def _wait(
    pid: int, streams: list[_Stream], cpu_s: float, walls: tuple[float, float]
) -> tuple[str | None, float]:
    """Read the child's pipes until it has exited or hit a limit ("cpu", "wall", "output").

    Returns the limit and the test's CPU seconds as last measured.

    ``walls``: the backstop and its cap, on the monotonic clock. Time the
    child's threads spent waiting for a CPU moves the backstop back (up to the cap).
    """
    backstop, cap = walls
    deadline = backstop
    by_fd = {stream.fd: stream for stream in streams}
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    for stream in streams:
        poller.register(stream.fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    clock = _cpu_clock(pid)
    cpus = max(len(os.sched_getaffinity(0)), 1)
    used = 0.0
    # Right after the fork it has used nothing; and in less than the floor it
    # cannot have used more than the floor on each CPU (as the jail's init).
    measured_at = time.monotonic()
    try:
        exited = False
        while not exited:
            now = time.monotonic()
            if now - measured_at >= _CHECK_FLOOR_S:
                used, measured_at = max(used, _test_cpu_s(pid, clock)), now
            cpu_left = cpu_s - used
            if now >= deadline and deadline < cap:
                deadline = max(deadline, min(backstop + _waited_s(pid), cap))
            wall_left = deadline - now
            if cpu_left <= 0 or wall_left <= 0:
                return ("cpu" if cpu_left <= 0 else "wall"), used
            floor = _STARVED_CHECK_S if now >= backstop else _CHECK_FLOOR_S
            timeout = min(wall_left, max(cpu_left / cpus, floor))
            for fd, _ in poller.poll(math.ceil(timeout * 1000)):
                if fd == pidfd:
                    exited = True
                elif not by_fd[fd].read():
                    poller.unregister(fd)
                elif by_fd[fd].over:
                    return "output", used
        return ("output" if any(_drain(stream) for stream in streams) else None), used
    finally:
        os.close(pidfd)


def _drain(stream: _Stream) -> bool:
    """Read what an exited test left in a pipe; True if that is past the cap.

    At most a bounded number of chunks: a descendant that still holds the pipe
    open does not keep the test running.
    """
    os.set_blocking(stream.fd, False)
    with contextlib.suppress(BlockingIOError):
        for _ in range(_DRAIN_CHUNKS):
            if not stream.read() or stream.over:
                break
    return stream.over


def _waited_s(pid: int) -> float:
    """Seconds the test's live threads have spent runnable, waiting for a CPU (schedstat):
    in a pid namespace of the jail's own, of every process there but us and its init
    (a test's child processes are starved by a busy host too); else of ``pid``'s."""
    pids = [str(pid)]
    if _own_proc():
        skip = {"1", str(os.getpid())}
        pids = [name for name in os.listdir("/proc") if name.isdigit() and name not in skip]
    total_ns = 0
    for one in pids:
        try:
            tids = os.listdir(f"/proc/{one}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{one}/task/{tid}/schedstat", "rb") as handle:
                    total_ns += int(handle.read().split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return total_ns / 1e9


def _test_cpu_s(pid: int, clock: int) -> float:
    """The CPU time of a running test: its child's (all threads, and the children it
    reaped) and, in a pid namespace of the jail's own, every other process there but
    us and the jail's init (a test's processes are all there is). Otherwise, the
    child's own: a child process's time counts once the test reaps it."""
    used = _cpu_time(clock) + _proc_ticks(str(pid), reaped_only=True) / _TICKS
    return used + _others_cpu_s({"1", str(os.getpid()), str(pid)})


def _own_cpu_s() -> float:
    """This process's CPU time (all its threads) and its reaped children's.

    Not its CPU clock: under RLIMIT_CPU (the jail sets it) the kernel reads that from
    the process's CPU timer, which catches up with the running thread only at the next
    tick or switch, and a short test read 0 ms; getrusage takes the running thread's
    time first."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def _others_cpu_s(skip: set[str]) -> float:
    """In a pid namespace of the jail's own, the CPU time of every process there but
    ``skip`` (pids); outside one, nothing (listing /proc would list the host's)."""
    if not _own_proc():
        return 0.0
    names = os.listdir("/proc")
    return sum(_proc_ticks(name) for name in names if name.isdigit() and name not in skip) / _TICKS


def _proc_ticks(pid: str, *, reaped_only: bool = False) -> int:
    """utime + stime + cutime + cstime of /proc/<pid>/stat (only the last two: ``reaped_only``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return 0  # gone: reaped, and counted by whoever reaped it
    fields = data[data.rindex(b")") + 2 :].split()
    return sum(int(field) for field in fields[13 if reaped_only else 11 : 15])


_TICKS = os.sysconf("SC_CLK_TCK")


@functools.cache
def _own_proc() -> bool:
    """Whether we are in the jail's pid namespace with a /proc of its own (listing it
    lists the jail's processes only)."""
    try:
        return os.getppid() == 1 and os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def _cpu_clock(pid: int) -> int:
    """The clock id of a process's CPU time (CPUCLOCK_SCHED, all its threads)."""
    return (~pid << 3) | 2


def _cpu_time(clock: int) -> float:
    try:
        return time.clock_gettime(clock)
    except OSError:
        return 0.0


def _reap(pid: int) -> tuple[int | None, resource.struct_rusage | None]:
    try:
        _, status, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return None, None
    return status, usage


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def _kill_leftovers() -> None:
    """Once a test's child is reaped: kill every process the test left, also one in a
    session of its own, and wait until they are gone (a SIGKILLed process takes a
    while to exit on a busy host; the next test must not find it).

    Everyone in the jail's pid namespace but us and its init: only when our parent
    is pid 1, the jail's init (outside a pid namespace of the jail's own, -1 would
    be every process of our uid on the host).
    """
    if os.getppid() != 1:
        return
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        return  # nobody was left (the usual case)
    deadline = time.monotonic() + _LEFTOVER_WAIT_S
    while _others_alive() and time.monotonic() < deadline:
        time.sleep(0.001)


def _others_alive() -> bool:
    """Whether a process of the jail other than us and its init has not exited yet."""
    if not _own_proc():
        return False
    me = str(os.getpid())
    for name in os.listdir("/proc"):
        if name.isdigit() and name not in ("1", me):
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    state = handle.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                return True
    return False


class _Given:
    """The files the worker put in /work, restored after every test; whatever else a
    test left in /work, /tmp or /dev/shm is removed (the next test must not see it,
    and its memory must not stay charged to the jail).

    Only where each of them is a tmpfs the jail mounted for this execution
    (``/proc/self/mountinfo``): a jail without its mounts layer runs in host
    directories, and the host's /tmp is never touched.
    """

    __slots__ = ("files", "mode", "others", "scratch")

    def __init__(
        self,
        files: dict[str, tuple[bytes, os.stat_result]],
        others: frozenset[str],
        mode: int,
        scratch: tuple[str, ...],
    ) -> None:
        self.files, self.others, self.mode, self.scratch = files, others, mode, scratch

    @classmethod
    def now(cls) -> _Given | None:
        """What /work holds now; None when the jail has no private /work to restore."""
        private = _jail_mounts()
        if "/work" not in private or os.getcwd() != "/work":
            return None
        files: dict[str, tuple[bytes, os.stat_result]] = {}
        others = set()
        for entry in os.scandir("."):
            if entry.is_file(follow_symlinks=False):
                with open(entry.name, "rb") as handle:
                    files[entry.name] = (handle.read(), entry.stat(follow_symlinks=False))
            else:
                others.add(entry.name)  # left as they are
        scratch = tuple(path for path in _SCRATCH_DIRS if path in private)
        return cls(files, frozenset(others), os.stat(".").st_mode, scratch)

    def restore(self) -> None:
        if os.stat(".").st_mode != self.mode:
            os.chmod(".", self.mode)
        seen = set()
        for entry in os.scandir("."):
            given = self.files.get(entry.name)
            if given is None:
                if entry.name not in self.others:
                    _remove(entry.name)
                continue
            seen.add(entry.name)
            if _same_file(entry.stat(follow_symlinks=False), given[1]):
                continue
            _remove(entry.name)
            self._rewrite(entry.name)
        for name in self.files.keys() - seen:
            self._rewrite(name)
        for scratch in self.scratch:
            with contextlib.suppress(OSError):
                for entry in os.scandir(scratch):
                    _remove(entry.path)

    def _rewrite(self, name: str) -> None:
        content, was = self.files[name]
        fd = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, was.st_mode & 0o7777
        )
        try:
            _write_all(fd, content)
            self.files[name] = (content, os.fstat(fd))
        finally:
            os.close(fd)


def _jail_mounts() -> frozenset[str]:
    """Mount points of the tmpfs file systems the jail made (their source is "rbjail")."""
    found = set()
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            if "-" not in fields:
                continue
            tail = fields[fields.index("-") + 1 :]
            if len(tail) >= 2 and tail[0] == "tmpfs" and tail[1] == "rbjail":
                found.add(fields[4])
    return frozenset(found)


def _same_file(now: os.stat_result, was: os.stat_result) -> bool:
    keys = ("st_ino", "st_mode", "st_size", "st_mtime_ns", "st_ctime_ns")
    return all(getattr(now, key) == getattr(was, key) for key in keys)


def _remove(path: str) -> None:
    """Remove a file or a whole tree (made writable first: a test may chmod its dirs)."""
    with contextlib.suppress(OSError):
        if not os.path.isdir(path) or os.path.islink(path):
            os.unlink(path)
            return
        os.chmod(path, 0o700)
        for entry in os.scandir(path):
            _remove(entry.path)
        os.rmdir(path)


def _record(
    data: bytes, status: int | None, limit: str | None, cpu_ms: float, wall_ms: float
) -> Record:
    if limit == "cpu":
        message = f"cpu limit: {cpu_ms:.0f} ms of CPU time used (in {wall_ms:.0f} ms)"
        return {"verdict": "time_limit", "message": message}
    if limit == "wall":
        message = (
            f"wall backstop: still running after {wall_ms:.0f} ms with {cpu_ms:.0f} ms"
            " of CPU time (sleeping or blocked)"
        )
        return {"verdict": "time_limit", "message": message}
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


def _read_marker(size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = os.read(0, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data.strip()


def _set_dumpable(value: int) -> None:
    # PR_SET_DUMPABLE(0) in the parent: /proc/<parent>/fd becomes unreadable to
    # the children, which run the program under the same uid. A child inherits
    # it and sets it back (1): its own /proc (schedstat) stays readable to the
    # parent, and to nobody else of that uid but its own descendants.
    prctl = _libc_prctl()
    if prctl is not None:
        prctl(4, value, 0, 0, 0)


@functools.cache
def _libc_prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once, in the parent: a ``CDLL`` made in every test's
    child cost it ~0.25 ms, a seventh of a function-call test."""
    try:
        import ctypes

        return ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None


# Looked up as the module loads: a warm zygote runs this body once for all its
# executions (pool.zygote_main's _keep_code), a cold run once for itself.
_libc_prctl()


# --- in the child ------------------------------------------------------------


def _child(job: Callable[[], Record], write_fd: int, memory_mb: int) -> None:
    try:
        os.setpgid(0, 0)
        _set_dumpable(1)
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


def _stdin_child(program: CodeType, fds: tuple[int, int, int]) -> None:
    status = 1
    try:
        os.setpgid(0, 0)
        _set_dumpable(1)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.closerange(3, 1 << 16)
        # The OOM killer must take this test, never the harness: the only memory
        # limit is the jail's, as a test in a jail of its own has.
        with contextlib.suppress(OSError):
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, b"1000")
            os.close(fd)
        status = _run_main(program)
    except BaseException:  # noqa: BLE001, S110 - nothing may escape into the harness's code
        pass
    os._exit(status)


def _run_main(program: CodeType) -> int:
    """Run the program as ``python solution.py`` runs it; its exit status."""
    # The standard streams a fresh interpreter has on these fds (PYTHONIOENCODING=utf-8).
    streams = {
        "stdin": io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), "utf-8"),
        "stdout": io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), "utf-8"),
        "stderr": io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
            "utf-8",
            errors="backslashreplace",
            line_buffering=True,
        ),
    }
    for name, stream in streams.items():
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__="solution.py", __builtins__=builtins)
    sys.modules["__main__"] = main
    sys.argv[:] = ["solution.py"]
    try:
        exec(program, main.__dict__)  # noqa: S102 - running the program is the point (inside the jail)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException as exc:  # noqa: BLE001 - as the interpreter does: a traceback, status 1
        import traceback  # already imported by the harness (see _tests)

        traceback.print_exception(
            type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None
        )
        status = 1
    return _shutdown(status)


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _shutdown(status: int) -> int:
    """What the interpreter does at exit: join non-daemon threads, run atexit, flush."""
    threading = sys.modules.get("threading")
    if threading is not None:
        with contextlib.suppress(BaseException):
            threading._shutdown()
    with contextlib.suppress(BaseException):
        import atexit

        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - as the interpreter: "Exception ignored", 120
            status = 120
    return status


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
    # After the program: a name of its own by that name is replaced.
    namespace[_GUARD] = _compare
    namespace[_CHAIN] = _compare_chain
    namespace[_BUILTINS] = builtins
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
    except _NotAnEquality as exc:
        raise _TestFailed(exc.message) from None
    return {"verdict": "accepted"}


# --- the tests' comparisons (see the module docstring) --------------------------

# The guard's name in the tests' namespace: drawn at random (per run, or per worker
# process when the worker compiled the tests), so the program cannot define or
# rebind it by name beforehand. One leading underscore: a `__name` would be
# mangled inside a class of the tests (unittest style) and not be found.
_GUARD = f"_rewardbus_compare_{os.urandom(8).hex()}"
_CHAIN = f"_rewardbus_chain_{os.urandom(8).hex()}"
# The real builtins, for tests that must not see a program's `abs = lambda x: 0`.
_BUILTINS = f"_rewardbus_builtins_{os.urandom(8).hex()}"
_BUILTIN_NAMES = frozenset(name for name in dir(builtins) if not name.startswith("_"))
_COMPARISONS = {
    ast.Eq: "==", ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in",
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
}  # fmt: skip
_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "in": lambda a, b: a in b,
    "not in": lambda a, b: a not in b,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "-": operator.sub,
}
_ORDERINGS = frozenset({"<", "<=", ">", ">="})
_SCALARS = frozenset({int, float, complex, str, bytes, bool, type(None)})
_SEQUENCES = frozenset({list, tuple, set, frozenset})
_PLAIN_KINDS = _SCALARS | _SEQUENCES | {dict}
_PLAIN_DEPTH = 32


class _NotAnEquality(BaseException):
    # BaseException: a test's own `except Exception` around an assert cannot hide it.
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Unrelated:
    """A fresh object that no honest value of the program's equals."""

    def __repr__(self) -> str:
        return "<an unrelated object>"


class _GuardComparisons(ast.NodeTransformer):
    """Comparisons and subtractions to guard calls; with ``protected``, those builtin
    names the tests use without binding them to the real builtins.

    Each node it makes takes the place of the node it replaces (what
    ``ast.fix_missing_locations`` would give it, without walking the whole tree again).
    """

    def __init__(self, protected: frozenset[str]) -> None:
        self._protected = protected

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return node  # nothing under it

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if not isinstance(node.ctx, ast.Load) or node.id not in self._protected:
            return node
        at = _place(node)
        real = ast.Name(id=_BUILTINS, ctx=ast.Load(), **at)
        return ast.Attribute(value=real, attr=node.id, ctx=ast.Load(), **at)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        # Python evaluates a chain's later operands only while it holds; the guard
        # call evaluates them all first, which only constants and names allow.
        eager = all(_pure(operand) for operand in node.comparators[1:])
        self.generic_visit(node)
        ops = [_COMPARISONS[type(op)] for op in node.ops if type(op) in _COMPARISONS]
        if len(ops) < len(node.ops) or not eager:
            return node
        at = _place(node)
        if len(ops) == 1:
            args = [ast.Constant(ops[0], **at), node.left, node.comparators[0]]
            guard = _GUARD
        else:
            elts: list[ast.expr] = [ast.Constant(op, **at) for op in ops]
            args = [ast.Tuple(elts=elts, ctx=ast.Load(), **at), node.left, *node.comparators]
            guard = _CHAIN
        return _guard_call(guard, args, at)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        # `abs(f(x) - y) < 1e-6`: a difference that ignores what is subtracted is a fake.
        self.generic_visit(node)
        if not isinstance(node.op, ast.Sub):
            return node
        at = _place(node)
        return _guard_call(_GUARD, [ast.Constant("-", **at), node.left, node.right], at)


def _place(node: ast.AST) -> dict[str, Any]:
    """``node``'s source position, for the nodes that replace it."""
    return {name: getattr(node, name) for name in _POSITION}


_POSITION = ("lineno", "col_offset", "end_lineno", "end_col_offset")


def _guard_call(guard: str, args: list[ast.expr], at: dict[str, Any]) -> ast.Call:
    function = ast.Name(id=guard, ctx=ast.Load(), **at)
    return ast.Call(func=function, args=args, keywords=[], **at)


def _pure(node: ast.expr) -> bool:
    """Whether evaluating ``node`` early, or when it would not have been, changes nothing."""
    if isinstance(node, ast.Constant | ast.Name):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return all(_pure(element) for element in node.elts)
    return False


def compile_suite(
    setup: str, cases: list[str | None], protect_builtins: bool
) -> tuple[CodeType, list[CodeType | None]]:
    """An assert suite's test code and cases compiled with the guard (module docstring).

    ``protect_builtins``: the builtin names the tests use mean the real builtins.
    Raises SyntaxError or ValueError when the test code does not compile.
    """
    return _compile_tests(setup, "tests.py", protect_builtins), [
        None if case is None else _compile_tests(case, f"case{i}", protect_builtins)
        for i, case in enumerate(cases)
    ]


def guard_names() -> tuple[str, str, str]:
    """The names the guard's functions take in the tests' namespace.

    Drawn when the module loads: per worker process for the suites it compiles
    (sent in the spec), per warm zygote or cold run for a suite the harness
    compiles itself.
    """
    return _GUARD, _CHAIN, _BUILTINS


def _compile_tests(code: str, filename: str, protect_builtins: bool = False) -> CodeType:
    tree = ast.parse(code, filename)
    protected = _BUILTIN_NAMES - _bound_names(tree) if protect_builtins else frozenset()
    tree = _GuardComparisons(protected).visit(tree)
    return compile(tree, filename, "exec", dont_inherit=True)  # as the program (see _tests)


def _bound_names(tree: ast.AST) -> frozenset[str]:
    """Every name the code binds anywhere (assigned, defined, imported, a parameter)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if type(node) not in _BINDERS:  # most nodes: one lookup
            continue
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names.update(node.names)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return frozenset(names)


# The node types _bound_names reads a name from (ast.parse makes exactly these types).
_BINDERS = frozenset(
    {
        ast.Name,
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.ClassDef,
        ast.arg,
        ast.alias,
        ast.Global,
        ast.Nonlocal,
        ast.ExceptHandler,
        ast.MatchAs,
        ast.MatchStar,
        ast.MatchMapping,
    }
)


def _plain(value: Any, depth: int = 0) -> bool:
    """Builtin scalars and builtin containers of them: their comparisons are the interpreter's."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if depth >= _PLAIN_DEPTH:
        return False
    if kind in _SEQUENCES:
        groups: tuple[Any, ...] = (value,)
    elif kind is dict:
        groups = (value.keys(), value.values())
    else:
        return False
    for items in groups:
        # The item types first (map and set run in C): a flat container ends here.
        kinds = set(map(type, items))
        if kinds <= _SCALARS:
            continue
        if not kinds <= _PLAIN_KINDS:
            return False
        if not all(_plain(item, depth + 1) for item in items if type(item) not in _SCALARS):
            return False
    return True


def _compare(op: str, left: Any, right: Any) -> Any:
    """``left <op> right`` as the tests wrote it, unless a value's comparison is a fake."""
    result = _OPERATORS[op](left, right)
    if _plain(left) and _plain(right):
        return result
    if op == "-":
        _check_difference(left, right, result)
        return result
    try:
        truth = bool(result)
    except Exception:  # noqa: BLE001 - an array's truth is ambiguous: the test's own business
        return result
    if op in _ORDERINGS:
        if truth:
            _check_ordering(op, left, right)
    elif truth is (op in ("==", "in")):
        _check_equality(op, left, right)
    return result


def _compare_chain(ops: tuple[str, ...], *operands: Any) -> Any:
    """``a <op0> b <op1> c ...`` as Python chains it, each link through _compare."""
    result: Any = True
    for index, op in enumerate(ops):
        result = _compare(op, operands[index], operands[index + 1])
        if not result:
            return result
    return result


def _check_ordering(op: str, left: Any, right: Any) -> None:
    """Raise _NotAnEquality if a non-plain side is also ordered against NaN (nothing is)."""
    nan = float("nan")
    for value, pair in ((left, (left, nan)), (right, (nan, right))):
        if not _plain(value) and _says(_OPERATORS[op], *pair):
            raise _NotAnEquality(
                f"a {type(value).__qualname__} compared {op} nan, which nothing can: "
                "its comparison is not an ordering"
            )


def _check_difference(left: Any, right: Any, result: Any) -> None:
    """Raise _NotAnEquality if a non-plain side's difference ignores the plain number."""
    if type(result) not in (int, float):
        return
    if not _plain(left) and type(right) in (int, float):
        again = _attempt(operator.sub, left, _CHANGES[type(right)](right))
    elif not _plain(right) and type(left) in (int, float):
        again = _attempt(operator.sub, _CHANGES[type(left)](left), right)
    else:
        return
    if type(again) in (int, float) and again == result:
        value = right if _plain(left) else left
        raise _NotAnEquality(
            f"a {type(value).__qualname__} gave the same difference whatever was subtracted: "
            "its arithmetic is not a subtraction"
        )


def _attempt(function: Callable[[Any, Any], Any], left: Any, right: Any) -> Any:
    try:
        return function(left, right)
    except Exception:  # noqa: BLE001 - as in _says
        return None


def _says(function: Callable[[Any, Any], Any], left: Any, right: Any) -> bool | None:
    """The truth ``function(left, right)`` claims; None when it (or its truth) raises,
    which is what an honest value may do with an unknown one."""
    try:
        return bool(function(left, right))
    except Exception:  # noqa: BLE001 - see the docstring
        return None


def _check_equality(op: str, left: Any, right: Any) -> None:
    """Raise _NotAnEquality if a non-plain value in a side also equals what it cannot equal.

    The non-plain values are looked for inside builtin lists, tuples and dicts too (a
    list's == asks its items'), each with what it was compared with at its place.
    """
    if op in ("in", "not in"):
        suspects = [*_suspects(left, None), *_suspects(right, None)]
        containers = [] if _plain(right) else [right]
    else:
        suspects = [*_suspects(left, right), *_suspects(right, left)]
        containers = []
    # Said equal by == or by != (each may be faked on its own).
    for value, counterpart in suspects:
        for probe in (_Unrelated(), *_changed(counterpart)):
            if _says(operator.eq, value, probe) or _says(operator.ne, value, probe) is False:
                raise _NotAnEquality(_fake(value, probe))
    for container in containers:  # a container of the program's that holds anything
        probe = _Unrelated()
        if _says(_OPERATORS["in"], probe, container) or (
            _says(_OPERATORS["not in"], probe, container) is False
        ):
            raise _NotAnEquality(_fake(container, probe, "held"))


def _suspects(value: Any, counterpart: Any, depth: int = 0) -> Iterator[tuple[Any, Any]]:
    """The non-plain values in ``value``, each with the counterpart's item at its place."""
    if _plain(value):
        return
    pairs = _pairs(value, counterpart) if depth < _PLAIN_DEPTH else None
    if pairs is None:
        yield value, counterpart
        return
    for item, other in pairs:
        yield from _suspects(item, other, depth + 1)


def _pairs(value: Any, counterpart: Any) -> list[tuple[Any, Any]] | None:
    """A builtin list's, tuple's or dict's items, each with the counterpart's at its place
    (None for each without one); None when ``value`` is none of those or the counterpart
    is not laid out like it."""
    kind = type(value)
    if kind not in (list, tuple, dict) or (
        counterpart is not None and type(counterpart) is not kind
    ):
        return None
    items = list(value.values()) if kind is dict else list(value)
    if counterpart is None:
        return [(item, None) for item in items]
    if kind is dict:
        same = counterpart.keys() == value.keys()
        return [(item, counterpart[key]) for key, item in value.items()] if same else None
    return list(zip(items, counterpart, strict=True)) if len(counterpart) == len(items) else None


def _changed(value: Any) -> list[Any]:
    """A value of ``value``'s plain type that differs from it (none if it is not plain)."""
    change = _CHANGES.get(type(value))
    return [change(value)] if change is not None and _plain(value) else []


_CHANGES: dict[type, Callable[[Any], Any]] = {
    bool: lambda v: not v,
    int: lambda v: v + 1,
    complex: lambda v: v + 1,
    float: lambda v: v + max(1.0, abs(v)) if math.isfinite(v) else 0.0,
    str: lambda v: v + "\0",
    bytes: lambda v: v + b"\0",
    list: lambda v: [*v, _Unrelated()],
    tuple: lambda v: (*v, _Unrelated()),
    set: lambda v: {*v, _Unrelated()},
    frozenset: lambda v: frozenset({*v, _Unrelated()}),
    dict: lambda v: {**v, _Unrelated(): None},
}


def _fake(value: Any, probe: Any, verb: str = "compared equal to") -> str:
    return (
        f"a {type(value).__qualname__} {verb} {probe!r}, which it cannot: "
        "its comparison is not an equality"
    )


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
