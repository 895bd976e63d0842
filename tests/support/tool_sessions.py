"""Test doubles of live tool sessions (``sandbox_workers.tools.session``): unisolated, unshipped.

- :class:`DictSession` runs each cell with ``exec`` in a dict in the test's own
  process: the session table, the replay protocol and the service run against it in
  unit tests. ``raise SystemExit`` in a cell ends the session (status session_lost);
  a cell that calls ``burn()`` reports a time limit (its session ended too).
"""

from __future__ import annotations

import contextlib
import io
import time
import traceback
from dataclasses import dataclass, field

from sandbox_workers.sandbox import SandboxFault
from sandbox_workers.tools import CellResult, LiveSession, SessionLimits

__all__ = ["DictSession", "DictSessions"]


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
