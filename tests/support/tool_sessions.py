"""Test doubles of live tool sessions (``sandbox_workers.tools.session``): unisolated, unshipped.

- :class:`DictSession` runs each cell with ``exec`` in a dict in the test's own
  process: the session table, the replay protocol and the service run against it in
  unit tests. ``raise SystemExit`` in a cell ends the session (status session_lost);
  a cell that calls ``burn()`` reports a time limit (its session ended too).
- :class:`ProcessSession` is a real interpreter per session, unjailed:
  ``python3 -I -S -u`` speaking one JSON line per cell on its stdin and stdout. The
  integration tests' worker uses it until the jail's sessions are connected
  (``rewardbus.wiring.build_tool_sessions``); it enforces the time limit by the wall
  clock (the interpreter is killed) and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
import time
import traceback
from dataclasses import dataclass, field

from sandbox_workers.sandbox import SandboxFault
from sandbox_workers.tools import CellResult, LiveSession, SessionLimits

__all__ = ["DictSession", "DictSessions", "ProcessSession", "ProcessSessions"]


class _TimeLimit(BaseException):
    """What ``burn()`` raises inside a DictSession cell."""


def _burn() -> None:
    raise _TimeLimit


class DictSession:
    """A "session" that is a dict: ``exec`` in the test process (a test double)."""

    def __init__(self, limits: SessionLimits) -> None:
        self.limits = limits
        self.namespace: dict[str, object] = {"burn": _burn}
        self.cells: list[str] = []
        self.closed = False
        self._alive = True
        self.fault_on: str | None = None  # a cell containing this raises SandboxFault

    @property
    def alive(self) -> bool:
        return self._alive and not self.closed

    async def run_cell(self, code: str, *, time_s: float, output_bytes: int) -> CellResult:
        if self.fault_on is not None and self.fault_on in code:
            raise SandboxFault("injected fault")
        self.cells.append(code)
        out, err = io.StringIO(), io.StringIO()
        status = "ok"
        started = time.monotonic()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                exec(compile(code, "<cell>", "exec"), self.namespace)
            except _TimeLimit:
                status, self._alive = "time_limit", False
            except SystemExit:
                status, self._alive = "session_lost", False
            except Exception:
                status = "error"
                traceback.print_exc(file=err)
        stdout, stderr = out.getvalue().encode(), err.getvalue().encode()
        truncated = len(stdout) > output_bytes or len(stderr) > output_bytes
        if truncated and status == "ok":
            status = "output_limit"
        return CellResult(
            status=status,  # type: ignore[arg-type]
            stdout=stdout[:output_bytes],
            stderr=stderr[:output_bytes],
            truncated=truncated,
            wall_ms=(time.monotonic() - started) * 1000,
            cpu_ms=0.0,
            alive=self._alive,
        )

    def memory_bytes(self) -> int:
        return 1024 * len(self.namespace)

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class DictSessions:
    """Starts :class:`DictSession` s and keeps every one it started."""

    started: list[DictSession] = field(default_factory=list)
    fail_starts: int = 0  # how many starts to refuse (SandboxFault) first

    async def start_session(self, limits: SessionLimits) -> LiveSession:
        if self.fail_starts > 0:
            self.fail_starts -= 1
            raise SandboxFault("injected start failure")
        session = DictSession(limits)
        self.started.append(session)
        return session


# The child: reads one JSON request a line, runs it in its namespace, answers one line.
_CHILD = r"""
import io, json, sys, traceback, time
ns = {"__name__": "__main__"}
real_out = sys.stdout
for line in sys.stdin:
    req = json.loads(line)
    out, err = io.StringIO(), io.StringIO()
    status = "ok"
    sys.stdout, sys.stderr = out, err
    t0 = time.process_time()
    try:
        exec(compile(req["code"], "<cell>", "exec"), ns)
    except SystemExit:
        status = "exit"
    except BaseException:
        status = "error"
        traceback.print_exc()
    finally:
        sys.stdout, sys.stderr = real_out, sys.__stderr__
    cpu = (time.process_time() - t0) * 1000
    real_out.write(json.dumps({"status": status, "stdout": out.getvalue(),
                               "stderr": err.getvalue(), "cpu_ms": cpu}) + "\n")
    real_out.flush()
    if status == "exit":
        break
"""


class ProcessSession:
    """One unjailed ``python3 -I -S -u`` interpreter (a test stand-in for the jail's)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc

    @classmethod
    async def start(cls) -> ProcessSession:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            "-u",
            "-c",
            _CHILD,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=1 << 24,
        )
        return cls(proc)

    @property
    def alive(self) -> bool:
        return self._proc.returncode is None

    async def run_cell(self, code: str, *, time_s: float, output_bytes: int) -> CellResult:
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        started = time.monotonic()
        try:
            self._proc.stdin.write(json.dumps({"code": code}).encode() + b"\n")
            await self._proc.stdin.drain()
            async with asyncio.timeout(time_s * 2 + 1):
                line = await self._proc.stdout.readline()
        except TimeoutError:
            await self.aclose()
            return _dead("time_limit", started)
        except (BrokenPipeError, ConnectionResetError):
            return _dead("session_lost", started)
        if not line:
            await self.aclose()
            return _dead("session_lost", started)
        answer = json.loads(line)
        if answer["status"] == "exit":
            await self.aclose()
            return _dead("session_lost", started)
        stdout, stderr = answer["stdout"].encode(), answer["stderr"].encode()
        truncated = len(stdout) > output_bytes or len(stderr) > output_bytes
        status = answer["status"]
        if truncated and status == "ok":
            status = "output_limit"
        return CellResult(
            status=status,
            stdout=stdout[:output_bytes],
            stderr=stderr[:output_bytes],
            truncated=truncated,
            wall_ms=(time.monotonic() - started) * 1000,
            cpu_ms=answer["cpu_ms"],
            alive=True,
        )

    def memory_bytes(self) -> int:
        try:
            with open(f"/proc/{self._proc.pid}/statm") as statm:
                return int(statm.read().split()[1]) * 4096
        except (OSError, ValueError):
            return 0

    async def aclose(self) -> None:
        if self._proc.returncode is None:
            self._proc.kill()
        await self._proc.wait()


def _dead(status: str, started: float) -> CellResult:
    return CellResult(
        status=status,  # type: ignore[arg-type]
        stdout=b"",
        stderr=b"",
        truncated=False,
        wall_ms=(time.monotonic() - started) * 1000,
        cpu_ms=0.0,
        alive=False,
    )


class ProcessSessions:
    """Starts :class:`ProcessSession` s."""

    async def start_session(self, limits: SessionLimits) -> LiveSession:
        del limits  # not enforced: a test stand-in
        return await ProcessSession.start()
