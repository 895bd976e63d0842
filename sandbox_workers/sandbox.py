"""The seam between judging (languages, test formats) and isolation (the jail).

Judging code builds :class:`ExecRequest` values and awaits
``sandbox.execute(request)``; it never launches a process itself. The jail
implements :class:`Sandbox`. Outcomes of the program (crash, timeout, memory
exhaustion) are data in :class:`ExecResult`; only infrastructure faults raise,
as :class:`SandboxFault`.

Time limits are CPU time, with a wall-clock backstop (:class:`WallBackstop`):
other work on the host's cores stretches a program's wall time but not its CPU
time, so the same program gets the same verdict on an idle host and on a
saturated one; a program that sleeps or blocks uses no CPU, and the backstop
ends it. Time the program spends runnable but waiting for a CPU does not count
against the backstop either (up to a cap).

A sandbox may also serve a *session* (:class:`SessionSandbox`): one program run
once per request, for a suite of stdin/stdout tests, each run as fresh as a new
execution would be but without building the isolation again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from sandbox_workers.errors import SandboxWorkerError

__all__ = [
    "DEFAULT_BACKSTOP",
    "BindMount",
    "ExecRequest",
    "ExecResult",
    "ProgramSession",
    "Sandbox",
    "SandboxFault",
    "SessionSandbox",
    "WallBackstop",
]


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
class WallBackstop:
    """How long, by the clock, a program may run for a CPU time limit of ``cpu_s``.

    :meth:`wall_s` is ``max(factor * cpu_s, cpu_s + extra_s)``: generous,
    because it must only catch programs that sleep or block. Time the program's
    tasks spend runnable but waiting for a CPU (a busy host; the kernel's
    schedstat run delay) moves the backstop back, so even a program that gets
    far less than ``1 / factor`` of a core is not cut short, up to
    :meth:`cap_s`, ``stretch`` times the backstop.
    """

    # 2x, not more: the backstop is there for programs that sleep or block, and a
    # program starved of CPU has its wait credited on top; at 3x a program sleeping
    # 3 x its limit (the verl parity set's too_slow_sleep) ran right up against the
    # backstop, and the few ms of run delay credited to it let some tests pass.
    factor: float = 2.0
    extra_s: float = 1.0
    # Waiting for a CPU is credited up to 10x the backstop: at 4x, a program given
    # 1/20 of a core (2 cores, the test's busy loops and ~20 other runnable tasks)
    # was cut short by the cap with half its CPU time unused.
    stretch: float = 10.0

    def __post_init__(self) -> None:
        if self.factor < 1.0 or self.extra_s < 0.0 or self.stretch < 1.0:
            raise ValueError("a wall backstop needs factor >= 1, extra_s >= 0, stretch >= 1")

    def wall_s(self, cpu_s: float) -> float:
        """The wall-clock backstop for a CPU time limit of ``cpu_s`` seconds."""
        return max(self.factor * cpu_s, cpu_s + self.extra_s)

    def cap_s(self, cpu_s: float) -> float:
        """The most wall time a run may take, waiting for CPUs included."""
        return self.stretch * self.wall_s(cpu_s)


DEFAULT_BACKSTOP = WallBackstop()


@dataclass(frozen=True)
class ExecRequest:
    """One program execution inside the jail.

    ``files`` are written into a fresh, private work directory (``/work`` inside
    the jail, also the cwd) before the program starts; names in ``executables``
    get mode 0755. After exit, files matching ``collect`` (globs relative to the
    work directory) are read back into :attr:`ExecResult.files`. ``argv[0]`` is
    resolved inside the jail's view of the file system; no shell is involved.

    ``time_s`` is CPU time: user + system time of the program, all its threads
    and all its descendants (exited ones included). ``wall_s`` is the
    wall-clock backstop, not counting time spent waiting for a CPU, and
    ``wall_cap_s`` the most wall time in all; None: :data:`DEFAULT_BACKSTOP`'s.

    ``warm_after``: the file of the work directory whose first open (its first
    read: ``warm_on_read``) ends the interpreter's start-up (see
    :class:`~sandbox_workers.languages.base.Launch`); a warm pool may run the
    request in a zygote forked there.
    """

    argv: tuple[str, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)
    executables: frozenset[str] = frozenset()
    stdin: bytes = b""
    env: Mapping[str, str] = field(default_factory=dict)
    time_s: float = 5.0
    wall_s: float | None = None
    wall_cap_s: float | None = None
    memory_mb: int = 512
    output_bytes: int = 1 << 20
    max_processes: int = 64
    file_size_mb: int = 64
    workdir_mb: int = 256
    extra_mounts: tuple[BindMount, ...] = ()
    collect: tuple[str, ...] = ()
    warm_after: str | None = None
    warm_on_read: bool = False

    @property
    def wall_limit_s(self) -> float:
        """The wall-clock backstop that applies (never below the CPU limit)."""
        wall = DEFAULT_BACKSTOP.wall_s(self.time_s) if self.wall_s is None else self.wall_s
        return max(wall, self.time_s)

    @property
    def wall_cap_limit_s(self) -> float:
        """The most wall time the run may take (never below the backstop)."""
        wall = self.wall_limit_s
        cap = DEFAULT_BACKSTOP.stretch * wall if self.wall_cap_s is None else self.wall_cap_s
        return max(cap, wall)


@dataclass(frozen=True)
class ExecResult:
    """What happened to one execution; every field is about the program.

    ``cpu_ms`` is the CPU time the limit was enforced on; ``waited_ms`` the
    time the program spent runnable but waiting for a CPU (its live threads
    as it exited; 0 when it hardly waited or it is not known). ``timed_out_by``
    says which limit ended a timed-out run: ``"cpu"`` (its CPU time) or
    ``"wall"`` (the wall-clock backstop: it slept or blocked). ``cpu_source``
    is how CPU time was measured: ``"cgroup"`` (the whole jail, exactly),
    ``"procfs"`` or ``"process"`` (degraded, without a cgroup CPU counter:
    per-process clocks; see :mod:`sandbox_workers.jail`).
    """

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
    timed_out_by: Literal["cpu", "wall"] | None = None
    cpu_source: str = ""
    waited_ms: float = 0.0

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


class ProgramSession(Protocol):
    """One program run once per :meth:`run`, each run as fresh as a new execution's.

    Every request passed to :meth:`run` must be the session's own (see
    :meth:`SessionSandbox.session`) but for its ``stdin`` and time limits.
    """

    async def run(self, request: ExecRequest) -> ExecResult:
        """Run the program with ``request.stdin`` under ``request``'s time limits."""
        ...

    async def aclose(self) -> None:
        """End the session (runs must have finished)."""
        ...


@runtime_checkable
class SessionSandbox(Protocol):
    """A sandbox that can serve sessions."""

    def session(self, request: ExecRequest) -> ProgramSession | None:
        """A session for ``request``'s program, or None where a session would not serve it
        better than one execution per request (then call ``execute``)."""
        ...
