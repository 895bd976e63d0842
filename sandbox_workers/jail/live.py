"""Live Python sessions in the jail: one jailed interpreter kept across cells.

A session is a cold jail like any execution's (its own slot and cgroups, pid,
mount, net, ipc and uts namespaces, a read-only root with a tmpfs /work and
/tmp, an unprivileged uid, seccomp, a scrubbed environment) whose program is
the session server (``sandbox_workers/tools/pysession_main.py``, read as text,
never imported here). The jail's own time limits are the session's lifetime;
it lives until :meth:`JailLiveSession.aclose`, a limit, or its interpreter's
death. The worker writes cells on the interpreter's stdin and reads result
frames from its stdout as they come (:class:`~.process.InteractiveLaunch`).

The cell runs in the same process as the server, so it can change or forge
anything the server does. The worker therefore trusts only the framing, which
it checks (:class:`ResultFrames`: a frame must be the one asked for, within the
output cap; anything else ends the session as lost), and enforces every limit
itself: CPU time per cell on the slot's cgroup counter (woken when the limit
could first be reached, at the rate the slot may use CPUs), a wall-clock
backstop per cell, memory by the cgroup (its OOM count says why the
interpreter died).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from sandbox_workers.jail.cgroups import CgroupSlot
from sandbox_workers.jail.process import InteractiveLaunch, monotonic_ms
from sandbox_workers.jail.slots import Slot
from sandbox_workers.sandbox import DEFAULT_BACKSTOP, SandboxFault
from sandbox_workers.tools.session import CellResult, CellStatus

__all__ = [
    "JailLiveSession",
    "ResultFrames",
    "SessionFrame",
    "SessionSpec",
    "cpu_rate",
    "interpreter",
    "request_frame",
    "server_source",
    "session_environment",
]

# The server's framing (pysession_main.py has the same two structs: it cannot import).
_REQUEST = struct.Struct("!4sIII")
_RESULT = struct.Struct("!4sIBII")
_REQUEST_MAGIC = b"RBPQ"
_RESULT_MAGIC = b"RBPR"
_OK, _ERROR, _EXIT = 0, 1, 2
# What the jail itself may write on the interpreter's stderr (its faults only).
_OWN_OUTPUT = 64 << 10
# Time the CPU-limit check may fire early by (the timer's and the counter's granularity).
_CPU_SLACK_MS = 1.0


@functools.cache
def server_source() -> str:
    """The session server's program (the interpreter's ``-c``)."""
    return resources.files("sandbox_workers.tools").joinpath("pysession_main.py").read_text()


def session_environment() -> dict[str, str]:
    """The interpreter's environment beyond the jail's, as the Python language sets it."""
    return {"PYTHONHASHSEED": "0", "PYTHONINTMAXSTRDIGITS": "0", "PYTHONIOENCODING": "utf-8"}


@dataclass(frozen=True)
class SessionFrame:
    """One cell's result as the server framed it."""

    status: int
    stdout: bytes
    stderr: bytes


class ResultFrames:
    """Result frames off the channel, checked against what was asked (no I/O).

    Anything else on the channel (the cell can write there: it runs in the
    server's process) raises ValueError, and the session ends as lost.

    At most one frame is expected at a time (the server's hello, then one per
    cell); what is kept is bounded by the frame's most legitimate size, so a
    flood from the cell costs the worker no memory.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._expected: tuple[int, int] | None = (0, 0)  # the server's hello

    def expect(self, seq: int, cap: int) -> None:
        """The next frame answers cell ``seq`` with outputs of at most ``cap`` + 1 bytes."""
        if self._expected is not None or self._buffer:
            raise ValueError("a cell asked for while another frame is due")
        self._expected = (seq, cap)

    def feed(self, data: bytes) -> SessionFrame | None:
        """Take what the channel gave; the expected frame once it is whole."""
        if self._expected is None:
            raise ValueError("bytes on the channel between cells")
        seq, cap = self._expected
        self._buffer += data
        if len(self._buffer) > _RESULT.size + 2 * (cap + 1):
            raise ValueError("a frame longer than its output cap allows")
        if len(self._buffer) < _RESULT.size:
            return None
        magic, got, status, out_len, err_len = _RESULT.unpack_from(self._buffer)
        if magic != _RESULT_MAGIC or got != seq or status not in (_OK, _ERROR, _EXIT):
            raise ValueError("a malformed frame header")
        if out_len > cap + 1 or err_len > cap + 1:
            raise ValueError("a frame longer than its output cap allows")
        end = _RESULT.size + out_len + err_len
        if len(self._buffer) < end:
            return None
        if len(self._buffer) > end:
            raise ValueError("bytes past the end of a frame")
        body = bytes(self._buffer[_RESULT.size :])
        self._buffer.clear()
        self._expected = None
        return SessionFrame(status, body[:out_len], body[out_len:])


def request_frame(seq: int, cap: int, code: str) -> bytes:
    """A cell's request as the server reads it."""
    payload = code.encode("utf-8", errors="surrogateescape")
    return _REQUEST.pack(_REQUEST_MAGIC, seq, cap, len(payload)) + payload


@dataclass(frozen=True)
class SessionSpec:
    """What a session needs of its sandbox: where it runs and how it is given back."""

    slot: Slot
    options: list[str]
    release: Callable[[Slot, bool], None]
    cpu_rate: float  # CPUs the slot may use at once (its quota, else the host's)
    setup_timeout_s: float
    kill_grace_s: float


class JailLiveSession:
    """One jailed interpreter serving cells: a :class:`~sandbox_workers.tools.LiveSession`.

    Start with :meth:`start`; one cell at a time (:meth:`run_cell`); end with
    :meth:`aclose` (idempotent), which kills every process of it, removes its
    files (its tmpfs die with its mount namespace) and gives its slot back.
    """

    def __init__(self, spec: SessionSpec) -> None:
        self._spec = spec
        self._cgroup: CgroupSlot | None = spec.slot.cgroup
        self._frames = ResultFrames()
        self._pending: asyncio.Future[SessionFrame | None] | None = None
        self._launch = InteractiveLaunch(self._on_data, _OWN_OUTPUT)
        self._seq = 0
        self._ended: str | None = None  # why the session ended (the worker's reason)
        self._released = False
        self._busy = False
        self._program: int | None = None  # the interpreter's host pid, once it is up

    # ------------------------------------------------------------------ start

    @classmethod
    async def start(cls, spec: SessionSpec) -> JailLiveSession:
        """Launch the jail and wait for the server's hello; SandboxFault if it does not come."""
        try:
            session = cls(spec)
        except BaseException:
            spec.release(spec.slot, False)
            raise
        try:
            await session._start()
        except BaseException:
            await session.aclose()
            raise
        return session

    async def _start(self) -> None:
        launch, spec = self._launch, self._spec
        await launch.start(spec.slot.spawner, spec.options)
        os.close(await launch.ready(spec.setup_timeout_s))
        if self._cgroup is not None:
            self._cgroup.start_measuring()
        hello = self._wait()
        launch.go()
        try:
            frame = await asyncio.wait_for(hello, spec.setup_timeout_s)
        except TimeoutError:
            frame = None
        if frame is None or frame.status != _OK:
            raise launch.fault() if launch.error else SandboxFault(self._failure())
        self._program = _program_pid(launch.pid)

    def _failure(self) -> str:
        tail = self._launch.stderr[-500:].decode(errors="replace").strip()
        return "the session's interpreter did not start" + (f" ({tail})" if tail else "")

    # ------------------------------------------------------------------ channel

    def _wait(self) -> asyncio.Future[SessionFrame | None]:
        self._pending = asyncio.get_running_loop().create_future()
        return self._pending

    def _on_data(self, data: bytes) -> None:
        frame: SessionFrame | None = None
        if not data:
            self._end("lost")
        else:
            try:
                frame = self._frames.feed(data)
            except ValueError:
                self._end("forged")
        pending = self._pending
        if pending is not None and not pending.done() and (frame is not None or self._ended):
            pending.set_result(frame)

    def _end(self, reason: str) -> None:
        """The session is over: take its jail down (the channel then reaches EOF)."""
        if self._ended is None:
            self._ended = reason
        self._launch.stop(reason)
        if self._pending is not None and not self._pending.done():
            self._pending.set_result(None)

    # ------------------------------------------------------------------ public

    @property
    def alive(self) -> bool:
        """Whether it can run another cell."""
        return self._ended is None and not self._released

    async def run_cell(self, code: str, *, time_s: float, output_bytes: int) -> CellResult:
        """Run ``code`` in the session's namespace; see :class:`CellResult` for the outcome.

        ``time_s`` is CPU time of the whole session while the cell runs (every
        process and thread); a cell that sleeps is stopped by the wall-clock
        backstop of :data:`~sandbox_workers.sandbox.DEFAULT_BACKSTOP`. Both end
        the session (status ``time_limit``). stdout and stderr are each cut at
        ``output_bytes``.
        """
        if time_s <= 0 or output_bytes < 0:
            raise ValueError("a cell needs a positive time limit and a non-negative output cap")
        if self._busy:
            raise RuntimeError("a session runs one cell at a time")
        if not self.alive:  # it ended before this cell (a result said so): the cell never ran
            await self.aclose()
            return CellResult("session_lost", b"", b"", False, 0.0, 0.0, alive=False)
        self._busy = True
        try:
            return await self._run_cell(code, time_s, output_bytes)
        finally:
            self._busy = False

    async def _run_cell(self, code: str, time_s: float, output_bytes: int) -> CellResult:
        self._seq += 1
        try:
            self._frames.expect(self._seq, output_bytes)
        except ValueError:
            self._end("forged")
            return await self._finish_lost(None, 0.0, 0.0)
        result = self._wait()
        started = monotonic_ms()
        watch = _CellWatch(self, time_s)
        cpu_before = watch.cpu_before
        try:
            await self._launch.send(request_frame(self._seq, output_bytes, code))
            frame = await result
        except SandboxFault:
            self._end("lost")
            frame = None
        except BaseException:
            self._end("cancelled")  # halfway through a cell: its state is unknown
            raise
        finally:
            watch.cancel()
            self._pending = None
        wall_ms = monotonic_ms() - started
        cpu_after = self._cpu_ms()
        cpu_ms = wall_ms if cpu_after is None or cpu_before is None else cpu_after - cpu_before
        if frame is None or frame.status == _EXIT:
            if frame is not None:
                self._end("exited")
            return await self._finish_lost(frame, wall_ms, cpu_ms, output_bytes)
        stdout, out_cut = _cut(frame.stdout, output_bytes)
        stderr, err_cut = _cut(frame.stderr, output_bytes)
        truncated = out_cut or err_cut
        status: CellStatus = "error" if frame.status == _ERROR else "ok"
        if status == "ok" and truncated:
            status = "output_limit"
        # A limit may have struck between the frame and now: the cell ran, the session ended.
        return CellResult(status, stdout, stderr, truncated, wall_ms, cpu_ms, alive=self.alive)

    async def _finish_lost(
        self, frame: SessionFrame | None, wall_ms: float, cpu_ms: float, cap: int = 0
    ) -> CellResult:
        """The cell ended the session: why, from the worker's reason and the cgroup."""
        oom = self._cgroup is not None and self._cgroup.stats().oom_killed
        reason = self._ended
        await self.aclose()
        status: CellStatus = "session_lost"
        if reason == "time_limit":
            status = "time_limit"
        elif oom:
            status = "memory_limit"
        stdout, out_cut = _cut(frame.stdout, cap) if frame is not None else (b"", False)
        stderr, err_cut = _cut(frame.stderr, cap) if frame is not None else (b"", False)
        return CellResult(status, stdout, stderr, out_cut or err_cut, wall_ms, cpu_ms, alive=False)

    def memory_bytes(self) -> int:
        """The session cgroup's memory now (without one: its processes' PSS)."""
        if self._released:
            return 0
        if self._cgroup is not None:
            charged = self._cgroup.memory_bytes()
            if charged is not None:
                return charged
        return _tree_pss(self._launch.pid) if self._launch.pid is not None else 0

    def processes(self) -> frozenset[int]:
        """Host pids of the session's processes: its slot's (spawner, the jail's
        init, the interpreter and its children), or without a cgroup init's tree."""
        if self._released:
            return frozenset()
        if self._cgroup is not None:
            return frozenset(self._cgroup.pids())
        pid = self._launch.pid
        return frozenset(_tree(pid)) if pid is not None else frozenset()

    async def aclose(self) -> None:
        """End the session: every process killed, its files gone, its slot given back."""
        if self._released:
            return
        self._released = True
        if self._ended is None:
            self._ended = "closed"
        launch, spec = self._launch, self._spec
        try:
            if not launch.exited:
                launch.stop(self._ended)
            await launch.finish(spec.kill_grace_s)
        finally:
            launch.close()
            # Never "finished": the jail was stopped, not ended by itself, so tasks of
            # it still dying in the slot are no surprise (the slot is then replaced).
            spec.release(spec.slot, False)

    # ------------------------------------------------------------------ limits

    def _cpu_ms(self) -> float | None:
        """CPU time the slot has used (None without a cgroup CPU counter)."""
        if self._cgroup is None or self._cgroup.cpu_counter is None:
            return None
        return self._cgroup.stats().cpu_ms

    def _waited_ms(self) -> float | None:
        """How long the interpreter has waited for a CPU (its schedstat run delay)."""
        if self._program is None:
            return None
        try:
            return int(Path(f"/proc/{self._program}/schedstat").read_text().split()[1]) / 1e6
        except (OSError, ValueError, IndexError):
            return None


class _CellWatch:
    """The limits of one cell on timers: its CPU time and the wall-clock backstop.

    The CPU check wakes when the limit could first be reached (the slot runs at
    most ``cpu_rate`` CPUs at once). The backstop is :data:`DEFAULT_BACKSTOP`'s,
    moved back by the time the interpreter waited for a CPU (its schedstat run
    delay) up to the backstop's cap, as the jail's init does for an execution.
    Without a CPU counter (degraded) the limit itself is wall time.
    """

    def __init__(self, session: JailLiveSession, time_s: float) -> None:
        self._session = session
        self._loop = asyncio.get_running_loop()
        self._started = self._loop.time()
        self.cpu_before = session._cpu_ms()
        self._waited_before = session._waited_ms()
        self._limit_ms = time_s * 1000
        self._rate = session._spec.cpu_rate
        self._cpu: asyncio.TimerHandle | None = None
        if self.cpu_before is None:
            self._backstop_s = self._cap_s = time_s
        else:
            self._backstop_s = DEFAULT_BACKSTOP.wall_s(time_s)
            self._cap_s = DEFAULT_BACKSTOP.cap_s(time_s)
            self._cpu = self._loop.call_later(self._limit_ms / self._rate / 1000, self._check_cpu)
        self._wall = self._loop.call_later(self._backstop_s, self._check_wall)

    def _check_cpu(self) -> None:
        used = self._session._cpu_ms()
        if used is None or self.cpu_before is None:
            return
        left_ms = self._limit_ms - (used - self.cpu_before)
        if left_ms <= _CPU_SLACK_MS:
            self._session._end("time_limit")
        else:
            self._cpu = self._loop.call_later(left_ms / self._rate / 1000, self._check_cpu)

    def _check_wall(self) -> None:
        waited, before = self._session._waited_ms(), self._waited_before
        credit_s = 0.0 if waited is None or before is None else max(waited - before, 0) / 1000
        deadline = min(self._backstop_s + credit_s, self._cap_s)
        left_s = deadline - (self._loop.time() - self._started)
        if left_s <= _CPU_SLACK_MS / 1000:
            self._session._end("time_limit")
        else:
            self._wall = self._loop.call_later(left_s, self._check_wall)

    def cancel(self) -> None:
        if self._cpu is not None:
            self._cpu.cancel()
        self._wall.cancel()


def _cut(data: bytes, cap: int) -> tuple[bytes, bool]:
    return (data[:cap], True) if len(data) > cap else (data, False)


def _children(pid: int) -> list[int]:
    try:
        listed = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in listed.split()]


def _program_pid(launched: int | None) -> int | None:
    """The jail's program: the first process below ``launched`` (the jail's init,
    or a supervisor above it) that is no longer the launcher, each the only child
    of the one above."""
    try:
        launcher = os.readlink(f"/proc/{launched}/exe") if launched is not None else None
    except OSError:
        return None
    pid = launched
    for _ in range(3):
        children = _children(pid) if pid is not None else []
        pid = children[0] if len(children) == 1 else None
        try:
            if pid is None or os.readlink(f"/proc/{pid}/exe") != launcher:
                return pid
        except OSError:
            return None
    return None


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (those still there)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in _tasks(current):
            with contextlib.suppress(OSError, ValueError):
                children = Path(f"/proc/{current}/task/{task}/children").read_text()
                todo += [int(child) for child in children.split()]
    return found


def _tree_pss(pid: int) -> int:
    """PSS of ``pid`` and its descendants, in bytes (0 for those already gone)."""
    total = 0
    for current in _tree(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
    return total


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def cpu_rate(cpu_cores: float | None) -> float:
    """How many CPUs a slot may use at once: its quota, else every CPU we may run on."""
    cpus = len(os.sched_getaffinity(0))
    return cpus if cpu_cores is None else min(cpu_cores, cpus)


def interpreter() -> tuple[str, Path]:
    """The worker's base interpreter (what the Python language runs) and its prefix."""
    prefix = Path(sys.base_prefix).resolve()
    major, minor = sys.version_info[:2]
    return str(prefix / "bin" / f"python{major}.{minor}"), prefix
