"""What the ``rbjail`` launcher is told: the options of one jail, as argv.

:class:`LauncherOptions` renders them from the :class:`~sandbox_workers.jail.JailConfig`
and the layers found active on this host: the part every jail of a sandbox
shares (:attr:`LauncherOptions.static`), and per request its time limits, cgroup
CPU counter, work dir, mounts, rlimits and whole environment, then ``--`` and
the request's argv. A zygote's jail starts from the same static part
(:mod:`sandbox_workers.jail.zygotes`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path

from sandbox_workers.jail.cgroups import CgroupSlot
from sandbox_workers.jail.config import JailConfig
from sandbox_workers.sandbox import ExecRequest

__all__ = ["WORKDIR", "LauncherOptions", "cpu_ms", "environment", "wall_cap_ms", "wall_ms"]

# Where a jail's private work dir is mounted (its HOME).
WORKDIR = "/work"


class LauncherOptions:
    """The launcher's options for the jails of one sandbox (see the module docstring)."""

    def __init__(self, config: JailConfig, active: frozenset[str], *, cgroups: bool) -> None:
        self._config = config
        self._active = active
        self._cgroups = cgroups
        self.static: tuple[str, ...] = tuple(self._static_options())

    def on(self, layer: str) -> bool:
        """Whether ``layer`` is active (found on this host and not disabled)."""
        return layer in self._active

    def for_request(
        self, request: ExecRequest, hostdir: Path | None, cgroup: CgroupSlot | None
    ) -> list[str]:
        """The jail's options for one request (the spawner adds nothing)."""
        options = [*self.static, "--cpu-ms", str(cpu_ms(request))]
        options += ["--wall-ms", str(wall_ms(request))]
        options += ["--wall-cap-ms", str(wall_cap_ms(request))]
        counter = cgroup.cpu_counter if cgroup is not None and self.on("cpu_time") else None
        if counter is not None:
            options += ["--cpu-counter", str(counter)]
        options += ["--work-mb", str(request.workdir_mb)]
        if hostdir is not None:
            options += ["--workdir", str(hostdir)]
        else:
            for mount in request.extra_mounts:
                options += ["--rw" if mount.writable else "--ro", str(mount.host), mount.target]
        options += self._rlimits(request)
        home = WORKDIR if hostdir is None else str(hostdir)
        for key, value in environment(self._config, request.env, home).items():
            options += ["--env", f"{key}={value}"]
        options.append("--")
        options += request.argv
        return options

    def rlimit_values(
        self, request: ExecRequest, extra_address_space: int = 0
    ) -> Iterator[tuple[str, int, int]]:
        """(name, soft, hard) of every rlimit an execution gets."""
        if not self.on("rlimits"):
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
        if not self.on("cgroup_pids"):
            # RLIMIT_NPROC counts every process of the uid host-wide: only a fallback.
            yield ("nproc", request.max_processes, request.max_processes)
        if not self.on("cgroup_memory"):
            # Address space, not memory: breaks thread-heavy runtimes, so only a fallback.
            limit = (request.memory_mb << 20) + extra_address_space
            yield ("as", limit, limit)

    def _rlimits(self, request: ExecRequest) -> Iterator[str]:
        for name, soft, hard in self.rlimit_values(request):
            yield from ("--rlimit", name, str(soft), str(hard))

    def _static_options(self) -> Iterator[str]:
        cfg = self._config
        yield "--wait-go"  # counters are reset between jail setup and the program's start
        if self._cgroups:
            yield "--cgroupns"
        yield from ("--uid", str(cfg.uid), "--gid", str(cfg.gid))
        yield from ("--hostname", cfg.hostname, "--tmp-mb", str(cfg.tmp_mb))
        yield from ("--inodes", str(cfg.max_inodes))
        yield "--ns" if self.on("namespaces") else "--no-ns"
        yield "--seccomp" if self.on("seccomp") else "--no-seccomp"
        yield "--loopback" if cfg.loopback else "--no-loopback"
        if not self.on("uid"):
            yield "--keep-uid"
        if self.on("mounts"):
            yield from ("--mounts", "--root", str(cfg.root_mountpoint))
            for path in cfg.system_mounts:
                yield from ("--mirror", path)
            for mount in cfg.extra_mounts:
                yield from ("--rw" if mount.writable else "--ro", str(mount.host), mount.target)
        else:
            yield "--no-mounts"


def cpu_ms(request: ExecRequest) -> int:
    """The request's CPU time limit in whole milliseconds (at least 1)."""
    return max(1, math.ceil(request.time_s * 1000))


def wall_ms(request: ExecRequest) -> int:
    """The request's wall-clock backstop in whole milliseconds (at least 1)."""
    return max(1, math.ceil(request.wall_limit_s * 1000))


def wall_cap_ms(request: ExecRequest) -> int:
    """The most the backstop may be moved back by CPU waits, in milliseconds (at least 1)."""
    return max(1, math.ceil(request.wall_cap_limit_s * 1000))


def environment(config: JailConfig, env: Mapping[str, str], home: str) -> dict[str, str]:
    """An execution's whole environment: nothing of the worker's passes through."""
    merged = {"PATH": config.path, "HOME": home, "LANG": "C.UTF-8"}
    merged.update(env)
    return merged
