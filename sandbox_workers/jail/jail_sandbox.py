"""JailSandbox: the :class:`~sandbox_workers.sandbox.Sandbox` that really isolates.

Per execution: a slot is taken from the pool (a long-lived ``rbjail --spawner``
inside its own cgroups; limits are set), the spawner forks the jail's init
(with the namespaces layer off, a supervisor above it), which builds a fresh
jail (namespaces, private root, tmpfs /work), the request's files are written
through an fd of that /work, the slot's counters are reset, the program runs
confined (rlimits, uid, seccomp) with a scrubbed environment, and after it ends
every process of the jail is dead, the results are read and the slot is checked
empty before it is reused.

Time limits: ``ExecRequest.time_s`` is CPU time of the whole jail (every
process and thread), enforced by the jail's init on the slot's cgroup CPU
counter, which it is handed (``--cpu-counter``; a zygote's executions get it as
an fd); ``ExecRequest.wall_limit_s`` is the wall-clock backstop for programs
that sleep or block, moved back by the time the jail's tasks wait for a CPU
(schedstat run delay) up to ``ExecRequest.wall_cap_limit_s``. Without a cgroup
CPU counter (degraded) init falls back to per-process clocks
(``ExecResult.cpu_source``: procfs, or process), and RLIMIT_CPU bounds each
process.

Requests for a pooled interpreter (``JailConfig.pool``) are served by a warm
zygote instead (:mod:`sandbox_workers.pool`): it forks the execution's pid 1,
which speaks the same status protocol, so everything after the fork (files,
limits, output, accounting, results) is the same code as above. When the pool
is disabled, exhausted, or a zygote fails before the program started, the
request runs cold.

A session (:meth:`JailSandbox.session`) serves a suite of stdin/stdout tests of
one program from one jail (``rbjail --session``): the namespaces, the root, the
files and the slot are set up once, and each test is a fork + exec in it, as
fresh as a new jail's program (see ``run_session`` in ``rbjail.c``). Its results
are read as a cold execution's are. Interpreters with a warm pool get no
session: a zygote's fork per test is cheaper than an interpreter's exec.

A live session (:meth:`JailSandbox.start_session`, for the tool service's
:class:`~sandbox_workers.tools.SessionFactory`) is a cold jail whose program is a
Python interpreter that serves cells until it is closed, keeping its namespace
and files; it holds its slot all that time (:mod:`.live`).

This module is the sequence; its parts live beside it: the slots
(:mod:`.slots`), the launcher's options (:mod:`.options`), the warm pool wired
to the jail (:mod:`.zygotes`) and the result (:mod:`.results`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_workers.jail.cgroups import CgroupLimits, CgroupSlot
from sandbox_workers.jail.config import IsolationUnavailable, JailConfig, LayerStatus
from sandbox_workers.jail.detect import probe_host
from sandbox_workers.jail.live import (
    JailLiveSession,
    SessionSpec,
    cpu_rate,
    interpreter,
    server_source,
    session_environment,
)
from sandbox_workers.jail.options import LauncherOptions, cpu_ms, wall_cap_ms, wall_ms
from sandbox_workers.jail.process import Launch, SessionRun, monotonic_ms
from sandbox_workers.jail.results import exec_result
from sandbox_workers.jail.slots import Slot, SlotPool
from sandbox_workers.jail.workdir import collect_files, validate_name, write_files
from sandbox_workers.jail.zygotes import execution_spec, warm_pool
from sandbox_workers.pool import PooledCommand, PoolStats, WarmPool
from sandbox_workers.sandbox import (
    BindMount,
    ExecRequest,
    ExecResult,
    ProgramSession,
    SandboxFault,
)
from sandbox_workers.tools.session import LiveSession, SessionFactory, SessionLimits

__all__ = ["JailSandbox"]

_log = logging.getLogger(__name__)

# Tasks of ours in a slot's cgroups besides the program's: spawner and the jail's
# init (the spawner forks init straight into a new pid namespace), and without
# the namespaces layer a supervisor above init.
_OWN_TASKS = 2
_SUPERVISOR_TASKS = 1
# A warm slot (always namespaced) also holds the zygote and the execution's pid 1
# (and a fork-at-open zygote's first process, which waits for it: native/rbjail_warm.c).
_POOL_OWN_TASKS = 4
# Memory the execution's pid 1 (a forked interpreter) and page tables take on
# top of the zygote's own pages, which stay charged to the slot.
_ZYGOTE_OVERHEAD_BYTES = 4 << 20
# What a session's init may write on its own stdout/stderr (its faults only).
_SESSION_OWN_OUTPUT = 64 << 10


class JailSandbox:
    """Runs each :class:`ExecRequest` in a fresh, fully isolated jail.

    Construction probes every layer (see :func:`detect_layers`); in strict mode
    a missing required layer raises :class:`IsolationUnavailable`, otherwise the
    sandbox runs without it and lists it in :attr:`degraded`. Call
    :meth:`aclose` when done: it stops warm zygotes and removes this instance's
    cgroups.
    """

    def __init__(self, config: JailConfig | None = None) -> None:
        self._config = config = config or JailConfig()
        host = probe_host(config)
        self._layers = tuple(host.layers)
        missing = [layer for layer in host.layers if layer.required and not layer.active]
        if host.binaries is None or (config.strict and missing):
            if host.tree is not None:
                host.tree.close()
            launcher = [layer for layer in host.layers if layer.name == "launcher"]
            raise IsolationUnavailable(missing or launcher)
        self._active = frozenset(layer.name for layer in host.layers if layer.active)
        self._degraded = tuple(layer.name for layer in host.layers if not layer.active)
        if self._degraded:
            _log.warning("jail running degraded, missing layers: %s", ", ".join(self._degraded))
        use_cgroups = host.tree is not None and bool(
            {"cgroup_memory", "cgroup_pids", "cgroup_cpu"} & self._active
        )
        if host.tree is not None and not use_cgroups:
            host.tree.close()
        tree = host.tree if use_cgroups else None
        max_idle = config.max_idle_slots if config.reuse_slots else 0
        self._options = LauncherOptions(config, self._active, cgroups=tree is not None)
        share_net = self._on("namespaces") and config.loopback and not config.fresh_net
        self._slots = SlotPool(str(host.binaries.launcher), tree, max_idle, share_net=share_net)
        if not self._on("mounts"):
            self._work_root = config.work_root or Path(tempfile.gettempdir()) / "rewardbus-work"
            self._work_root.mkdir(parents=True, exist_ok=True)
        self._closed = False
        # Sessions need init to be pid 1 of a pid namespace over a root of its own.
        self._sessions = self._on("namespaces") and self._on("mounts")
        # Slots of live or starting zygotes and of live sessions: close() takes them down.
        self._held = held = set[Slot]()
        self._pool = warm_pool(config, self._options, self._slots, host.binaries, held)
        # A sandbox nobody closed still stops its zygotes and removes its cgroups
        # when collected or at exit.
        self._finalizer = weakref.finalize(self, _close_all, self._pool, held, self._slots)

    # ------------------------------------------------------------------ public

    @property
    def degraded(self) -> tuple[str, ...]:
        """Names of isolation layers that are missing (or disabled) on this host."""
        return self._degraded

    @property
    def layers(self) -> tuple[LayerStatus, ...]:
        """Every layer as detected at construction."""
        return self._layers

    @property
    def pool_stats(self) -> PoolStats | None:
        """Warm-pool counters, or None when the pool is off."""
        return self._pool.stats if self._pool is not None else None

    async def execute(self, request: ExecRequest) -> ExecResult:
        """Run one request in a fresh jail; SandboxFault only for infrastructure faults."""
        if self._closed:
            raise SandboxFault("the jail sandbox is closed")
        _validate(request)
        command = self._pool.command(request) if self._pool is not None else None
        if command is not None:
            result = await self._execute_warm(command, request)
            if result is not None:
                return result
        return await self._execute_cold(request)

    def session(self, request: ExecRequest) -> ProgramSession | None:
        """A session running ``request``'s program once per run, or None (module docstring)."""
        if self._closed or not self._sessions or request.collect:
            return None
        if self._pool is not None and self._pool.command(request) is not None:
            return None
        _validate(request)
        return _Session(self, request)

    async def start_session(self, limits: SessionLimits) -> JailLiveSession:
        """A live Python session in a jail of its own (a :class:`SessionFactory`).

        The session's interpreter is the Python language's (the worker's base
        installation, read-only); its jail gets every layer an execution gets,
        with ``limits`` for its cgroups and /work and its lifetime as the jail's
        own CPU-time limit and wall-clock backstop. See :mod:`.live`.
        Raises SandboxFault when it cannot start (or this host cannot serve
        sessions: they need the namespaces and mounts layers).
        """
        if self._closed:
            raise SandboxFault("the jail sandbox is closed")
        if not self._sessions:
            raise SandboxFault("live sessions need the namespaces and mounts layers")
        request = self._session_request(limits)
        slot = self._slots.acquire(self._limits(request))
        self._held.add(slot)
        spec = SessionSpec(
            slot=slot,
            options=self._options.for_request(request, None, slot.cgroup),
            release=self._release_held,
            cpu_rate=cpu_rate(self._config.cpu_cores if self._on("cgroup_cpu") else None),
            setup_timeout_s=self._config.setup_timeout_s,
            kill_grace_s=self._config.kill_grace_s,
        )
        return await JailLiveSession.start(spec)

    def _session_request(self, limits: SessionLimits) -> ExecRequest:
        if min(limits.memory_mb, limits.max_processes, limits.workdir_mb) <= 0:
            raise ValueError("a session's memory, processes and work dir must be positive")
        if limits.lifetime_s <= 0:
            raise ValueError("a session's lifetime must be positive")
        python, prefix = interpreter()
        # -S -B as the Python language runs programs; -u: output reaches the
        # captured fds as it is written.
        return ExecRequest(
            argv=(python, "-S", "-B", "-u", "-c", server_source()),
            env=session_environment(),
            time_s=limits.lifetime_s,
            wall_s=limits.lifetime_s,
            wall_cap_s=limits.lifetime_s,
            memory_mb=limits.memory_mb,
            max_processes=limits.max_processes,
            workdir_mb=limits.workdir_mb,
            extra_mounts=(BindMount(host=prefix, target=str(prefix)),),
        )

    def _release_held(self, slot: Slot, finished: bool) -> None:
        # A slot the sandbox's close() already took down is not given back.
        if slot in self._held:
            self._held.discard(slot)
            self._slots.release(slot, finished=finished)

    async def warm(self, request: ExecRequest, count: int | None = None) -> int:
        """Start zygotes for requests like ``request`` now (default: the pre-warm count).

        Returns how many are live (0 when the request is not poolable or the pool is off).
        """
        command = self._pool.command(request) if self._pool is not None else None
        if self._pool is None or command is None:
            return 0
        return await self._pool.warm(command.profile, count)

    def resident_pids(self) -> frozenset[int]:
        """Host pids of processes kept between executions besides the slot spawners (zygotes)."""
        return self._pool.resident_pids() if self._pool is not None else frozenset()

    async def __aenter__(self) -> JailSandbox:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop warm zygotes and release this instance's cgroups. Executions must have finished."""
        self.close()

    def close(self) -> None:
        """Synchronous :meth:`aclose`."""
        if not self._closed:
            self._closed = True
            self._finalizer()

    # ------------------------------------------------------------------ cold

    async def _execute_cold(self, request: ExecRequest) -> ExecResult:
        slot = self._slots.acquire(self._limits(request))
        hostdir = None if self._on("mounts") else self._host_workdir()
        launch: Launch | None = None
        try:
            launch = Launch(request.stdin, request.output_bytes)
            await launch.start(
                slot.spawner, self._options.for_request(request, hostdir, slot.cgroup)
            )
            workfd = await launch.ready(self._config.setup_timeout_s)
            try:
                return await self._run(request, launch, workfd, slot.cgroup)
            finally:
                os.close(workfd)
        finally:
            if launch is not None:
                launch.close()
            self._slots.release(slot, finished=launch is not None and launch.exited)
            if hostdir is not None:
                shutil.rmtree(hostdir, ignore_errors=True)

    # ------------------------------------------------------------------ warm

    async def _execute_warm(
        self, command: PooledCommand, request: ExecRequest
    ) -> ExecResult | None:
        """Run in a zygote; None when none is free or it failed before the program ran."""
        assert self._pool is not None
        zygote = await self._pool.acquire(command.profile)
        if zygote is None:
            return None
        reusable = False
        launch: Launch | None = None
        try:
            if zygote.cgroup is not None:
                allowance = zygote.info.anon_kb * 1024 + _ZYGOTE_OVERHEAD_BYTES
                own = _POOL_OWN_TASKS + (command.profile.trigger is not None)
                zygote.cgroup.prepare(self._limits(request, own, allowance))
            counter = None
            if zygote.cgroup is not None and self._on("cpu_time"):
                counter = zygote.cgroup.cpu_counter_fd()
            spec = execution_spec(self._config, self._options, command, request, zygote)
            zygote.load(spec, cpu_counter=counter)
            launch = Launch(request.stdin, request.output_bytes)
            await launch.start(zygote, ())
            workfd = await launch.ready(self._config.setup_timeout_s)
        except BaseException as exc:
            # Whatever happened (a fault, a cancellation, a request that cannot be
            # encoded), this zygote is taken down: it may hold a half-started run.
            if launch is not None:
                launch.close()
            self._pool.release(zygote, reusable=False)
            if not isinstance(exc, (SandboxFault, OSError)):
                raise
            _log.warning("warm pool: zygote failed before the program started (%s): cold", exc)
            return None
        try:
            try:
                result = await self._run(request, launch, workfd, zygote.cgroup)
            finally:
                os.close(workfd)
            reusable = launch.exited
            return result
        finally:
            launch.close()
            self._pool.release(zygote, reusable=reusable and zygote.healthy())

    # ------------------------------------------------------------------ one run

    async def _run(
        self, request: ExecRequest, launch: Launch, workfd: int, cgroup: CgroupSlot | None
    ) -> ExecResult:
        started = monotonic_ms()
        if request.files:
            owner = (self._config.uid, self._config.gid) if self._on("uid") else None
            write_files(workfd, request.files, request.executables, owner)
        if cgroup is not None:
            cgroup.start_measuring()  # the jail is built: what follows is the program's
        launch.go()
        await launch.finish(request.wall_cap_limit_s + self._config.kill_grace_s)
        if launch.error is not None or (launch.report is None and launch.stop_reason is None):
            raise launch.fault()
        stats = cgroup.stats() if cgroup is not None else None
        files = collect_files(workfd, request.collect, self._config.collect_bytes)
        return exec_result(launch, launch.report, stats, monotonic_ms() - started, files)

    def _limits(
        self, request: ExecRequest, own_tasks: int | None = None, extra_memory: int = 0
    ) -> CgroupLimits:
        # A disabled (or missing) controller is left alone, never half-applied.
        if own_tasks is None:
            own_tasks = _OWN_TASKS + (0 if self._on("namespaces") else _SUPERVISOR_TASKS)
        memory = (request.memory_mb << 20) + extra_memory
        return CgroupLimits(
            memory_bytes=memory if self._on("cgroup_memory") else None,
            max_processes=request.max_processes + own_tasks if self._on("cgroup_pids") else None,
            cpu_cores=self._config.cpu_cores if self._on("cgroup_cpu") else None,
        )

    def _host_workdir(self) -> Path:
        # Degraded (no mount namespace): a private host directory, no size cap.
        path = Path(tempfile.mkdtemp(prefix="run-", dir=self._work_root))
        if self._on("uid"):
            os.chown(path, self._config.uid, self._config.gid)
        return path

    def _on(self, layer: str) -> bool:
        return self._options.on(layer)


class _Session:
    """A :class:`JailSandbox` session: one jail serving every run.

    The jail starts with the first run and is replaced after a run that ended
    it (stopped for its output, or past its deadline). Where the host cannot
    serve sessions (the jail's init reports ``error session: ...`` before a
    program ran) the sandbox stops offering them and the run is executed cold.
    """

    def __init__(self, sandbox: JailSandbox, request: ExecRequest) -> None:
        self._sandbox = sandbox
        self._request = request
        self._launch: Launch | None = None
        self._slot: Slot | None = None

    async def run(self, request: ExecRequest) -> ExecResult:
        """Run the program once with ``request.stdin`` and ``request``'s time limits."""
        if request.argv != self._request.argv or request.files.keys() != self._request.files.keys():
            raise ValueError("a session runs its own program only: argv or files differ")
        sandbox = self._sandbox
        if not sandbox._sessions:
            return await sandbox.execute(request)
        launch, slot = await self._serving()
        run = SessionRun(request.stdin, request.output_bytes, lambda: launch.stop("output"))
        started = monotonic_ms()
        try:
            if slot.cgroup is not None:
                slot.cgroup.start_measuring()
            await launch.run(run, cpu_ms(request), wall_ms(request), wall_cap_ms(request))
            if run.report is None and (launch.error or "").startswith("session:"):
                _log.warning("jail sessions unavailable here (%s): one jail per run", launch.error)
                sandbox._sessions = False
                await self.aclose()
                return await sandbox.execute(request)
            if run.report is None and run.stop_reason is None:
                raise launch.fault()
            stats = slot.cgroup.stats() if slot.cgroup is not None else None
            return exec_result(run, run.report, stats, monotonic_ms() - started, {})
        finally:
            run.close()
            if not launch.serving:
                await self.aclose()

    async def _serving(self) -> tuple[Launch, Slot]:
        if self._launch is not None and self._slot is not None and self._launch.serving:
            return self._launch, self._slot
        await self.aclose()
        sandbox, request = self._sandbox, self._request
        slot = sandbox._slots.acquire(sandbox._limits(request))
        launch = Launch(b"", _SESSION_OWN_OUTPUT)
        try:
            options = sandbox._options.for_request(request, None, slot.cgroup)
            await launch.start(slot.spawner, ["--session", *options])
            workfd = await launch.ready(sandbox._config.setup_timeout_s)
            try:
                owner = (sandbox._config.uid, sandbox._config.gid) if sandbox._on("uid") else None
                write_files(workfd, request.files, request.executables, owner)
            finally:
                os.close(workfd)
            launch.go()
        except BaseException:
            launch.close()
            sandbox._slots.release(slot, finished=False)
            raise
        self._launch, self._slot = launch, slot
        return launch, slot

    async def aclose(self) -> None:
        """End the session's jail (if one is up) and give its slot back."""
        launch, slot = self._launch, self._slot
        self._launch = self._slot = None
        if launch is None or slot is None:
            return
        try:
            if launch.serving:
                launch.end()
            await launch.finish(self._sandbox._config.kill_grace_s)
        finally:
            launch.close()
            self._sandbox._slots.release(slot, finished=launch.exited)


def _close_all(pool: WarmPool[CgroupSlot] | None, held: set[Slot], slots: SlotPool) -> None:
    if pool is not None:
        pool.close()
    for slot in list(held):  # zygotes still starting and live sessions when the sandbox closed
        slots.discard(slot)
    held.clear()
    slots.close()


def _validate(request: ExecRequest) -> None:
    if not request.argv or not request.argv[0]:
        raise ValueError("ExecRequest.argv must name a program")
    if any("\0" in arg for arg in request.argv) or any("\0" in v for v in request.env.values()):
        raise ValueError("argv and environment values cannot contain NUL bytes")
    for name in request.files:
        validate_name(name)
    for key in request.env:
        if not key or "=" in key or "\0" in key:
            raise ValueError(f"invalid environment variable name: {key!r}")
    for mount in request.extra_mounts:
        if not mount.target.startswith("/"):
            raise ValueError(f"bind mount target must be absolute: {mount.target!r}")


if TYPE_CHECKING:  # mypy checks that the jail fills the tool service's seam

    def _a_session_factory(sandbox: JailSandbox) -> SessionFactory:
        return sandbox

    def _a_live_session(session: JailLiveSession) -> LiveSession:
        return session
