"""The seam between the tool service (sessions by id, replay, Kafka) and live interpreters.

A :class:`LiveSession` is one jailed interpreter that keeps its state (namespace,
imports, files in its private tmpfs) between cells. The service runs one cell at a
time per session (:meth:`LiveSession.run_cell`) and never sees how the session is
isolated; a :class:`SessionFactory` (the jail) starts them. A cell's outcome is data
(:class:`CellResult`); only an infrastructure failure raises
(:class:`~sandbox_workers.sandbox.SandboxFault`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["CellResult", "CellStatus", "LiveSession", "SessionFactory", "SessionLimits"]

# ok: ran to its end; error: raised (the traceback is in stderr); time_limit: its CPU
# time ran out; memory_limit: the session's memory ran out; output_limit: stdout or
# stderr went past the cap (cut there); session_lost: the interpreter died.
CellStatus = Literal["ok", "error", "time_limit", "memory_limit", "output_limit", "session_lost"]


@dataclass(frozen=True)
class SessionLimits:
    """What one session may use in all (a cell's own limits are :meth:`LiveSession.run_cell`'s)."""

    memory_mb: int = 512
    max_processes: int = 32
    workdir_mb: int = 64
    lifetime_s: float = 3600.0


@dataclass(frozen=True)
class CellResult:
    """What one cell did. ``alive`` is whether the session survived it (it did for
    ok, error and output_limit; a time or memory limit or a dead interpreter ends it)."""

    status: CellStatus
    stdout: bytes
    stderr: bytes
    truncated: bool
    wall_ms: float
    cpu_ms: float
    alive: bool


class LiveSession(Protocol):
    """One live, isolated interpreter."""

    @property
    def alive(self) -> bool:
        """Whether it can run another cell."""
        ...

    async def run_cell(self, code: str, *, time_s: float, output_bytes: int) -> CellResult:
        """Run ``code`` in the session's namespace under a CPU-time limit and an output cap."""
        ...

    def memory_bytes(self) -> int:
        """What the session holds now (its cgroup's memory, or its processes' PSS)."""
        ...

    async def aclose(self) -> None:
        """End the session: every process of it killed, its files gone."""
        ...


class SessionFactory(Protocol):
    """Starts live sessions (the jail implements it)."""

    async def start_session(self, limits: SessionLimits) -> LiveSession:
        """A new, empty session; raises SandboxFault when one cannot be started."""
        ...
