"""The seam between judging (languages, test formats) and isolation (the jail).

Judging code builds :class:`ExecRequest` values and awaits
``sandbox.execute(request)``; it never launches a process itself. The jail
implements :class:`Sandbox`. Outcomes of the program (crash, timeout, memory
exhaustion) are data in :class:`ExecResult`; only infrastructure faults raise,
as :class:`SandboxFault`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sandbox_workers.errors import SandboxWorkerError

__all__ = ["BindMount", "ExecRequest", "ExecResult", "Sandbox", "SandboxFault"]


class SandboxFault(SandboxWorkerError):
    """The sandbox itself failed (not the program). Retriable unless a subclass says not."""

    retriable = True


@dataclass(frozen=True)
class BindMount:
    """A host path made visible inside the jail at ``target`` (read-only by default)."""

    host: Path
    target: str
    writable: bool = False


@dataclass(frozen=True)
class ExecRequest:
    """One program execution inside the jail.

    ``files`` are written into a fresh, private work directory (``/work`` inside
    the jail, also the cwd) before the program starts; names in ``executables``
    get mode 0755. After exit, files matching ``collect`` (globs relative to the
    work directory) are read back into :attr:`ExecResult.files`. ``argv[0]`` is
    resolved inside the jail's view of the file system; no shell is involved.
    """

    argv: tuple[str, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)
    executables: frozenset[str] = frozenset()
    stdin: bytes = b""
    env: Mapping[str, str] = field(default_factory=dict)
    time_s: float = 5.0
    memory_mb: int = 512
    output_bytes: int = 1 << 20
    max_processes: int = 64
    file_size_mb: int = 64
    workdir_mb: int = 256
    extra_mounts: tuple[BindMount, ...] = ()
    collect: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExecResult:
    """What happened to one execution; every field is about the program."""

    exit_code: int | None
    signal: int | None
    stdout: bytes
    stderr: bytes
    wall_ms: float
    cpu_ms: float
    peak_memory_kb: int
    timed_out: bool = False
    memory_exceeded: bool = False
    output_exceeded: bool = False
    files: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Exited by itself with status 0 within every limit."""
        return (
            self.exit_code == 0
            and not self.timed_out
            and not self.memory_exceeded
            and not self.output_exceeded
        )


class Sandbox(Protocol):
    """Runs one :class:`ExecRequest` in isolation."""

    @property
    def degraded(self) -> tuple[str, ...]:
        """Names of isolation layers that are missing on this host."""
        ...

    async def execute(self, request: ExecRequest) -> ExecResult:
        """Run the request; raise :class:`SandboxFault` only for infrastructure faults."""
        ...

    async def aclose(self) -> None:
        """Release what the sandbox keeps between executions (warm pools, cgroups)."""
        ...
