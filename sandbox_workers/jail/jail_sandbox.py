"""JailSandbox: the :class:`~sandbox_workers.sandbox.Sandbox` that really isolates.

Per execution: a slot is taken from the pool (a long-lived ``rbjail --spawner``
inside its own cgroups; limits are set), the spawner forks a supervisor that
builds a fresh jail (namespaces, private root, tmpfs /work), the request's files
are written through an fd of that /work, the slot's counters are reset, the
program runs confined (rlimits, uid, seccomp) with a scrubbed environment, and
after it ends every process of the jail is dead, the results are read and the
slot is checked empty before it is reused.

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
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from sandbox_workers.jail.build import Binaries
from sandbox_workers.jail.cgroups import CgroupLimits, CgroupSlot, CgroupStats, CgroupTree
from sandbox_workers.jail.config import IsolationUnavailable, JailConfig, LayerStatus, PoolConfig
from sandbox_workers.jail.detect import probe_host
from sandbox_workers.jail.process import JailReport, Launch, Spawner, monotonic_ms
from sandbox_workers.jail.workdir import collect_files, validate_name, write_files
from sandbox_workers.sandbox import ExecRequest, ExecResult, SandboxFault

if TYPE_CHECKING:
    from sandbox_workers.pool import (
        ExecutionSpec,
        PooledCommand,
        PoolStats,
        Profile,
        WarmPool,
        Zygote,
    )

__all__ = ["JailSandbox"]

_log = logging.getLogger(__name__)
_WORKDIR = "/work"


# Tasks of ours in a slot's cgroups besides the program's: spawner, supervisor, init.
_OWN_TASKS = 3
# A warm slot also holds the zygote and the execution's pid 1.
_POOL_OWN_TASKS = 5
# A zygote's jail has no time limit of its own (the launcher wants one: ~10 years,
# of CPU and of wall time: its executions' CPU adds up in the same slot).
_ZYGOTE_LIFETIME_MS = 10 * 365 * 24 * 3600 * 1000
# While it starts, a zygote imports modules: generous limits, replaced per execution.
_ZYGOTE_START_MEMORY = 512 << 20
_ZYGOTE_START_PROCESSES = 16
# Memory the execution's pid 1 (a forked interpreter) and page tables take on
# top of the zygote's own pages, which stay charged to the slot.
_ZYGOTE_OVERHEAD_BYTES = 4 << 20


@dataclass(eq=False)  # identity: slots are kept in sets
class _Slot:
    """Where one execution at a time runs: a spawner, inside its cgroups if any."""

    spawner: Spawner
    cgroup: CgroupSlot | None


class _SlotPool:
    """Slots for concurrent executions; a slot whose jail ended cleanly is reused."""

    def __init__(self, launcher: str, tree: CgroupTree | None, max_idle: int) -> None:
        self._launcher = launcher
        self._tree = tree
        self._max_idle = max_idle
        self._free: list[_Slot] = []
        self._dirty: list[CgroupSlot] = []

    def _new(self) -> _Slot:
        cgroup = self._tree.new_slot() if self._tree is not None else None
        try:
            return _Slot(Spawner(self._launcher, cgroup.procs_files if cgroup else ()), cgroup)
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            raise

    def acquire(self, limits: CgroupLimits) -> _Slot:
        self._retry_dirty()
        slot = None
        while self._free and slot is None:
            slot = self._free.pop()
            if not slot.spawner.alive:
                self.discard(slot)
                slot = None
        slot = slot or self._new()
        if slot.cgroup is not None:
            try:
                slot.cgroup.prepare(limits)
            except OSError as exc:
                self.discard(slot)
                raise SandboxFault(f"cannot prepare cgroup: {exc}") from exc
        return slot

    def release(self, slot: _Slot, *, finished: bool) -> None:
        """Return a slot; ``finished``: its jail ended by itself (not cancelled or failed)."""
        leftover = slot.cgroup is not None and not slot.cgroup.is_empty(
            frozenset({slot.spawner.pid})
        )
        if leftover and finished:
            # The jail's pid namespace is gone, so nothing can be left; if
            # something is, the slot is killed and never reused.
            _log.warning("processes left in a cgroup slot after the jail ended: killing")
        reusable = slot.cgroup is None or slot.cgroup.reusable
        idle_full = len(self._free) >= self._max_idle
        if leftover or not slot.spawner.alive or idle_full or not reusable:
            self.discard(slot)
        else:
            self._free.append(slot)

    def discard(self, slot: _Slot) -> None:
        """Stop a slot's spawner (and all it started) and remove its cgroups."""
        slot.spawner.close()
        if slot.cgroup is not None:
            slot.cgroup.kill()
            if not slot.cgroup.remove():
                self._dirty.append(slot.cgroup)

    def _retry_dirty(self) -> None:
        if self._dirty:
            self._dirty = [c for c in self._dirty if not (c.kill() or c.remove())]

    def close(self) -> None:
        for slot in self._free:
            self.discard(slot)
        self._free.clear()
        self._retry_dirty()
        if self._tree is not None:
            self._tree.close()


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
        self._slots = _SlotPool(str(host.binaries.launcher), tree, max_idle)
        self._cgroups = tree is not None
        if not self._on("mounts"):
            self._work_root = config.work_root or Path(tempfile.gettempdir()) / "rewardbus-work"
            self._work_root.mkdir(parents=True, exist_ok=True)
        self._static = tuple(self._static_options())
        self._closed = False
        held: set[_Slot] = set()
        self._pool = self._warm_pool(host.binaries, held)
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
            await launch.start(slot.spawner, self._options(request, hostdir, slot.cgroup))
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

    def _warm_pool(self, binaries: Binaries, held: set[_Slot]) -> WarmPool | None:
        pool = self._config.pool
        if not pool.enabled:
            return None
        if not (self._on("namespaces") and self._on("mounts")):
            _log.info("warm pool off: zygotes need the namespaces and mounts layers")
            return None
        # Imported here: the pool is built on the jail's parts (an import cycle otherwise).
        from sandbox_workers.pool import WarmPool

        interpreters = frozenset(pool.interpreters or (_base_python(),))
        starter = _ZygoteStarter(self._config, self._static, self._slots, binaries, held)
        return WarmPool(pool, interpreters, starter)

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
                zygote.cgroup.prepare(self._limits(request, _POOL_OWN_TASKS, allowance))
            counter = None
            if zygote.cgroup is not None and self._on("cpu_time"):
                counter = zygote.cgroup.cpu_counter_fd()
            zygote.load(self._warm_spec(command, request, zygote), cpu_counter=counter)
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

    def _warm_spec(
        self, command: PooledCommand, request: ExecRequest, zygote: Zygote
    ) -> ExecutionSpec:
        """The execution as the zygote's pid 1 and program need it."""
        from sandbox_workers.pool import ExecutionSpec, shadowed_modules  # see _warm_pool

        cfg = self._config
        drop_uid = self._on("uid")
        # Without a memory cgroup, RLIMIT_AS is the limit: the zygote's mappings,
        # which the program inherits, come on top (a fresh interpreter has its own).
        rlimits = self._rlimit_values(request, extra_address_space=zygote.info.vsz_kb << 10)
        return ExecutionSpec(
            argv=request.argv,
            code=command.code,
            args=command.args,
            cpu_ms=_cpu_ms(request),
            wall_ms=_wall_ms(request),
            wall_cap_ms=_wall_cap_ms(request),
            work_mb=request.workdir_mb,
            tmp_mb=cfg.tmp_mb,
            inodes=cfg.max_inodes,
            uid=cfg.uid,
            gid=cfg.gid,
            drop_uid=drop_uid,
            seccomp=self._on("seccomp"),
            loopback=cfg.loopback,
            rlimits=tuple(rlimits),
            shadow=tuple(shadowed_modules(request.files)),
        )

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
        return _result(launch, launch.report, stats, monotonic_ms() - started, files)

    def _limits(
        self, request: ExecRequest, own_tasks: int = _OWN_TASKS, extra_memory: int = 0
    ) -> CgroupLimits:
        # A disabled (or missing) controller is left alone, never half-applied.
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
        return layer in self._active

    # ------------------------------------------------------------------ argv

    def _static_options(self) -> Iterator[str]:
        cfg = self._config
        yield "--wait-go"  # counters are reset between jail setup and the program's start
        if self._cgroups:
            yield "--cgroupns"
        yield from ("--uid", str(cfg.uid), "--gid", str(cfg.gid))
        yield from ("--hostname", cfg.hostname, "--tmp-mb", str(cfg.tmp_mb))
        yield from ("--inodes", str(cfg.max_inodes))
        yield "--ns" if self._on("namespaces") else "--no-ns"
        yield "--seccomp" if self._on("seccomp") else "--no-seccomp"
        yield "--loopback" if cfg.loopback else "--no-loopback"
        if not self._on("uid"):
            yield "--keep-uid"
        if self._on("mounts"):
            yield from ("--mounts", "--root", str(cfg.root_mountpoint))
            for path in cfg.system_mounts:
                yield from ("--mirror", path)
            for mount in cfg.extra_mounts:
                yield from ("--rw" if mount.writable else "--ro", str(mount.host), mount.target)
        else:
            yield "--no-mounts"

    def _rlimit_values(
        self, request: ExecRequest, extra_address_space: int = 0
    ) -> Iterator[tuple[str, int, int]]:
        """(name, soft, hard) of every rlimit an execution gets."""
        if not self._on("rlimits"):
            return
        # The jail's init enforces time_s on the CPU time of all its processes;
        # per process, this only backs it up (whole seconds, each process its own).
        cpu = math.ceil(request.time_s) + 1
        fsize = request.file_size_mb << 20
        yield ("cpu", cpu, cpu + 1)
        yield ("fsize", fsize, fsize)
        nofile = self._config.max_open_files
        yield ("nofile", nofile, nofile)
        yield ("core", 0, 0)
        if not self._on("cgroup_pids"):
            # RLIMIT_NPROC counts every process of the uid host-wide: only a fallback.
            yield ("nproc", request.max_processes, request.max_processes)
        if not self._on("cgroup_memory"):
            # Address space, not memory: breaks thread-heavy runtimes, so only a fallback.
            limit = (request.memory_mb << 20) + extra_address_space
            yield ("as", limit, limit)

    def _rlimits(self, request: ExecRequest) -> Iterator[str]:
        for name, soft, hard in self._rlimit_values(request):
            yield from ("--rlimit", name, str(soft), str(hard))

    def _env(self, request: ExecRequest, hostdir: Path | None) -> dict[str, str]:
        home = _WORKDIR if hostdir is None else str(hostdir)
        return _environment(self._config, request.env, home)

    def _options(
        self, request: ExecRequest, hostdir: Path | None, cgroup: CgroupSlot | None
    ) -> list[str]:
        """The supervisor's options for one request (the spawner adds nothing)."""
        options = [*self._static, "--cpu-ms", str(_cpu_ms(request))]
        options += ["--wall-ms", str(_wall_ms(request))]
        options += ["--wall-cap-ms", str(_wall_cap_ms(request))]
        counter = cgroup.cpu_counter if cgroup is not None and self._on("cpu_time") else None
        if counter is not None:
            options += ["--cpu-counter", str(counter)]
        options += ["--work-mb", str(request.workdir_mb)]
        if hostdir is not None:
            options += ["--workdir", str(hostdir)]
        else:
            for mount in request.extra_mounts:
                options += ["--rw" if mount.writable else "--ro", str(mount.host), mount.target]
        options += self._rlimits(request)
        for key, value in self._env(request, hostdir).items():
            options += ["--env", f"{key}={value}"]
        options.append("--")
        options += request.argv
        return options


def _cpu_ms(request: ExecRequest) -> int:
    return max(1, math.ceil(request.time_s * 1000))


def _wall_ms(request: ExecRequest) -> int:
    return max(1, math.ceil(request.wall_limit_s * 1000))


def _wall_cap_ms(request: ExecRequest) -> int:
    return max(1, math.ceil(request.wall_cap_limit_s * 1000))


def _environment(config: JailConfig, env: Mapping[str, str], home: str) -> dict[str, str]:
    """An execution's whole environment: nothing of the worker's passes through."""
    merged = {"PATH": config.path, "HOME": home, "LANG": "C.UTF-8"}
    merged.update(env)
    return merged


def _base_python() -> str:
    """The worker's base interpreter (what the Python language runs), the default pooled one."""
    prefix = Path(sys.base_prefix).resolve()
    return str(prefix / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")


@functools.cache
def _zygote_source() -> str:
    return resources.files("sandbox_workers.pool").joinpath("zygote_main.py").read_text()


class _ZygoteStarter:
    """Starts zygotes in fresh slots.

    Holds no reference to the sandbox: the sandbox's finaliser must not keep it alive.
    """

    def __init__(
        self,
        config: JailConfig,
        static: tuple[str, ...],
        slots: _SlotPool,
        binaries: Binaries,
        held: set[_Slot],
    ) -> None:
        self._config = config
        self._static = static
        self._slots = slots
        self._binaries = binaries
        self._held = held  # slots of live or starting zygotes: close() takes them down

    async def __call__(self, profile: Profile) -> Zygote:
        from sandbox_workers.pool import Zygote  # see _warm_pool: import cycle

        cfg = self._config
        limits = CgroupLimits(_ZYGOTE_START_MEMORY, _ZYGOTE_START_PROCESSES, cfg.cpu_cores)
        slot = self._slots.acquire(limits)
        self._held.add(slot)

        def release() -> None:
            self._held.discard(slot)
            self._slots.discard(slot)

        return await Zygote.start(
            profile=profile,
            spawner=slot.spawner,
            cgroup=slot.cgroup,
            release=release,
            options=self._options(profile, cfg.pool),
            library=self._binaries.library,
            wait_go="--wait-go" in self._static,
            timeout_s=cfg.pool.start_timeout_s,
        )

    def _options(self, profile: Profile, pool: PoolConfig) -> list[str]:
        # The zygote keeps root and has no seccomp filter: it makes namespaces and
        # mounts for its children and runs nothing untrusted; each child confines
        # itself. The jail around it is still built for --uid (passwd, /work).
        options = [*self._static, "--keep-root", "--no-seccomp"]
        lifetime = str(_ZYGOTE_LIFETIME_MS)
        options += ["--cpu-ms", lifetime, "--wall-ms", lifetime, "--wall-cap-ms", lifetime]
        options += ["--work-mb", "1"]
        for mount in profile.mounts:
            options += ["--rw" if mount.writable else "--ro", str(mount.host), mount.target]
        for key, value in _environment(self._config, dict(profile.env), _WORKDIR).items():
            options += ["--env", f"{key}={value}"]
        settings = json.dumps(
            {
                "preload": list(pool.preload),
                "fresh_net": pool.fresh_net,
                "loopback": self._config.loopback,
            }
        )
        options += ["--", profile.interpreter, *profile.options, "-c", _zygote_source(), settings]
        return options


def _close_all(pool: WarmPool | None, held: set[_Slot], slots: _SlotPool) -> None:
    if pool is not None:
        pool.close()
    for slot in list(held):  # zygotes still starting when the sandbox closed
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


def _result(
    launch: Launch,
    report: JailReport | None,
    stats: CgroupStats | None,
    elapsed_ms: float,
    files: dict[str, bytes],
) -> ExecResult:
    exit_code: int | None = None
    signum: int | None = int(signal.SIGKILL)
    wall_ms, cpu_ms, rss_kb = elapsed_ms, 0.0, 0
    timed_out_by: Literal["cpu", "wall"] | None = None
    cpu_source, waited_ms = "", 0.0
    # No report: we stopped the jail (output cap, backstop deadline) before its
    # init could report, and the program died with its pid namespace (SIGKILL).
    if report is not None:
        exit_code, signum = report.exit_code, report.signal
        wall_ms, cpu_ms, rss_kb = report.wall_ms, report.cpu_ms, report.maxrss_kb
        cpu_source, waited_ms = report.cpu_source, report.waited_ms
        if report.timed_out:
            timed_out_by = "wall" if report.limit == "wall" else "cpu"
    elif stats is not None and stats.cpu_ms is not None:
        cpu_ms = stats.cpu_ms
    if stats is not None:
        # The cgroup sees the whole tree and its tmpfs files, but not file pages
        # that were already cached; the largest RSS sees those: report the larger.
        rss_kb = max(rss_kb, stats.peak_memory_kb or 0)
    if timed_out_by is None and signum == signal.SIGXCPU:
        timed_out_by = "cpu"  # one process's RLIMIT_CPU
    if timed_out_by is None and launch.stop_reason == "timeout":
        timed_out_by = "wall"  # the worker's own deadline: the jail's init did not stop it
    return ExecResult(
        exit_code=exit_code,
        signal=signum,
        stdout=launch.stdout,
        stderr=launch.stderr,
        wall_ms=wall_ms,
        cpu_ms=cpu_ms,
        peak_memory_kb=rss_kb,
        timed_out=timed_out_by is not None,
        memory_exceeded=stats.oom_killed if stats is not None else False,
        output_exceeded=launch.output_exceeded,
        files=files,
        timed_out_by=timed_out_by,
        cpu_source=cpu_source,
        waited_ms=waited_ms,
    )
