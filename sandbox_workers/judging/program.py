"""Turning source into a runnable :class:`Program`: the compile step, cached.

Interpreted languages need no step: the program is the source file. Compiled
languages compile inside the sandbox with the compile limits
(``Limits.compile_time_s``, CPU time like every time limit, with the same
wall-clock backstop; ``compile_memory_mb``); the artifacts come back through
``collect`` and go into every later run through ``files``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from sandbox_workers.compile_cache import Artifact, CompileCache, artifact_key
from sandbox_workers.judging.classify import describe_exit, describe_timeout
from sandbox_workers.languages import BASE_ENV, CompileStep, Language, Toolchain, utf8
from sandbox_workers.sandbox import (
    DEFAULT_BACKSTOP,
    ExecRequest,
    ExecResult,
    Sandbox,
    SandboxFault,
    WallBackstop,
)
from schemas import Limits

__all__ = ["Builder", "CompileFailure", "Program"]

_tracer = trace.get_tracer(__name__)

# Compilers can be chatty; their output is only read for the error message.
_COMPILER_OUTPUT_BYTES = 1 << 20
_COMPILE_WORKDIR_MB = 512


@dataclass(frozen=True)
class Program:
    """A runnable program: the files for the work directory and how to start it."""

    language: Language
    toolchain: Toolchain
    source: str
    entry: str
    files: Mapping[str, bytes] = field(default_factory=dict)
    executables: frozenset[str] = frozenset()
    # The sandbox limits memory by RLIMIT_AS: runtimes need their reservations.
    address_space_limited: bool = False
    # Python: ``source`` compiled by the worker, marshalled (languages.python's
    # check_program), which the harness loads instead of compiling; None: it compiles.
    code: bytes | None = None

    def request(
        self,
        limits: Limits,
        *,
        time_s: float,
        wall_s: float | None = None,
        wall_cap_s: float | None = None,
        stdin: bytes = b"",
        files: Mapping[str, bytes] | None = None,
        entry: str | None = None,
        args: tuple[str, ...] = (),
        memory_slack_mb: int = 0,
        output_slack_bytes: int = 0,
    ) -> ExecRequest:
        """One execution of this program (or of ``entry``, e.g. a harness) under ``limits``.

        ``time_s`` is its CPU time limit, ``wall_s`` its wall-clock backstop and
        ``wall_cap_s`` the backstop's cap (None: the sandbox's defaults). ``files`` are added to the
        program's own files (and win on a clash); ``args`` are appended to the
        command line.
        """
        launch = self.language.launch(self.toolchain, entry or self.entry, limits)
        reserve_mb = launch.reserve_mb if self.address_space_limited else 0
        return ExecRequest(
            argv=launch.argv + args,
            files={**launch.files, **self.files, **(files or {})},
            executables=self.executables,
            stdin=stdin,
            env={**BASE_ENV, **launch.env},
            time_s=time_s,
            wall_s=wall_s,
            wall_cap_s=wall_cap_s,
            memory_mb=limits.memory_mb + launch.memory_overhead_mb + reserve_mb + memory_slack_mb,
            output_bytes=limits.output_kb * 1024 + output_slack_bytes,
            max_processes=launch.max_processes,
            extra_mounts=self.toolchain.mounts,
            warm_after=launch.warm_after,
            warm_on_read=launch.warm_on_read,
        )


@dataclass(frozen=True)
class CompileFailure:
    """The source did not compile; ``message`` is the compiler's (capped)."""

    message: str


class Builder:
    """Prepares programs, compiling through the cache when the language needs it."""

    def __init__(
        self,
        sandbox: Sandbox,
        cache: CompileCache,
        *,
        message_bytes: int,
        backstop: WallBackstop = DEFAULT_BACKSTOP,
    ) -> None:
        self._sandbox = sandbox
        self._cache = cache
        self._message_bytes = message_bytes
        self._backstop = backstop
        # Without the cgroup memory controller the jail falls back to RLIMIT_AS.
        self._address_space_limited = "cgroup_memory" in sandbox.degraded

    async def build(
        self,
        language: Language,
        toolchain: Toolchain,
        source: str,
        limits: Limits,
        *,
        extra_args: tuple[str, ...] = (),
    ) -> Program | CompileFailure:
        """A runnable program for ``source``, or why it does not compile.

        ``extra_args`` are appended to the compile command (and so to its cache key).
        Raises :class:`SandboxFault` when the sandbox fails (retriable).
        """
        source = language.prepare_source(source)
        source_name = language.source_name(source)
        step = language.compile_step(toolchain, source_name)
        if step is not None and extra_args:
            step = replace(step, argv=step.argv + extra_args)
        if step is None:
            return Program(
                language=language,
                toolchain=toolchain,
                source=source,
                entry=source_name,
                files={source_name: utf8(source)},
                address_space_limited=self._address_space_limited,
            )
        key = artifact_key(language.name, toolchain.version, *step.argv, source_name, source)

        async def compile_now() -> tuple[Artifact, bool]:
            return await self._compile(step, toolchain, source_name, source, limits)

        artifact = await self._cache.get_or_build(key, compile_now)
        if not artifact.ok:
            return CompileFailure(artifact.message)
        return Program(
            language=language,
            toolchain=toolchain,
            source=source,
            entry=step.entry,
            files=artifact.files,
            executables=step.executables & artifact.files.keys(),
            address_space_limited=self._address_space_limited,
        )

    async def _compile(
        self,
        step: CompileStep,
        toolchain: Toolchain,
        source_name: str,
        source: str,
        limits: Limits,
    ) -> tuple[Artifact, bool]:
        request = ExecRequest(
            argv=step.argv,
            files={source_name: utf8(source)},
            env={**BASE_ENV, **step.env},
            time_s=limits.compile_time_s,
            wall_s=self._backstop.wall_s(limits.compile_time_s),
            wall_cap_s=self._backstop.cap_s(limits.compile_time_s),
            memory_mb=limits.compile_memory_mb
            + (step.reserve_mb if self._address_space_limited else 0),
            output_bytes=_COMPILER_OUTPUT_BYTES,
            max_processes=step.max_processes,
            workdir_mb=_COMPILE_WORKDIR_MB,
            extra_mounts=toolchain.mounts + toolchain.compile_mounts,
            collect=step.collect,
        )
        with _tracer.start_as_current_span("compile") as span:
            span.set_attribute("rewardbus.language", toolchain.language)
            result = await self._sandbox.execute(request)
            span.set_attribute("rewardbus.compile.wall_ms", result.wall_ms)
            built = self._artifact(step, result)
            if not built[0].ok:  # the program's failure: shown as an error span
                span.set_status(Status(StatusCode.ERROR, built[0].message[:200]))
        return built

    def _artifact(self, step: CompileStep, result: ExecResult) -> tuple[Artifact, bool]:
        if result.timed_out_by == "wall":
            # A compiler runs no code of the program's and reads no input: one that
            # sits past the backstop (its waits for a CPU already credited) was held
            # up by the host, so the executor tries again, then says sandbox_error.
            raise SandboxFault("compiler " + describe_timeout(result))
        if result.timed_out or result.memory_exceeded:
            # The CPU limit or memory, possibly load-dependent (memory held by page
            # cache): report it, but let the next attempt try again.
            reason = "compilation " + describe_exit(result)
            return Artifact(ok=False, message=reason), False
        if not result.ok:
            return Artifact(ok=False, message=self._message(result)), True
        missing = [name for name in step.executables if name not in result.files]
        if not result.files or missing:
            raise SandboxFault(f"compiler exited 0 but produced no artifact ({step.collect})")
        return Artifact(ok=True, files=dict(result.files)), True

    def _message(self, result: ExecResult) -> str:
        # The first errors are the informative ones: keep the head.
        output = result.stderr if result.stderr.strip() else result.stdout
        text = output[: self._message_bytes].decode("utf-8", errors="replace").strip()
        return text or f"compilation failed ({describe_exit(result)})"
