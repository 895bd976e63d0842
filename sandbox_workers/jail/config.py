"""What the jail is told (:class:`JailConfig`) and what it found (:class:`LayerStatus`).

Errors (the whole tree: :mod:`sandbox_workers.errors`)::

    SandboxFault               infrastructure, retriable
    └── IsolationUnavailable   a required layer is missing (strict mode refuses to start)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from sandbox_workers.pool.config import PoolConfig
from sandbox_workers.sandbox import BindMount, SandboxFault
from schemas import cache_root

__all__ = [
    "ALL_LAYERS",
    "DEFAULT_REQUIRED",
    "DEFAULT_SYSTEM_MOUNTS",
    "IsolationUnavailable",
    "JailConfig",
    "LayerStatus",
]

# Every layer the jail knows, in the order they are reported.
ALL_LAYERS: tuple[str, ...] = (
    "launcher",
    "namespaces",
    "mounts",
    "cgroup_memory",
    "cgroup_pids",
    "cgroup_cpu",
    "cpu_time",
    "seccomp",
    "rlimits",
    "uid",
)

# Strict mode refuses to run without these. cgroup_cpu is a fairness quota, not a
# containment layer: its absence degrades but does not block. cpu_time (time
# limits on the cgroup's CPU counter: every process and thread of a jail) falls
# back to per-process CPU clocks, which a program can outrun only with children
# (each still bounded by RLIMIT_CPU and the wall-clock backstop): it degrades.
DEFAULT_REQUIRED: frozenset[str] = frozenset(
    {
        "launcher",
        "namespaces",
        "mounts",
        "cgroup_memory",
        "cgroup_pids",
        "seccomp",
        "rlimits",
        "uid",
    }
)

# Host paths shown read-only at the same place inside the jail. A symlink stays a
# symlink (merged-/usr distributions link /bin -> usr/bin); missing paths are
# skipped. Never /etc wholesale: no passwd, shadow, or host configuration.
DEFAULT_SYSTEM_MOUNTS: tuple[str, ...] = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/nsswitch.conf",
    "/etc/os-release",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/java-17-openjdk",
)


class IsolationUnavailable(SandboxFault):
    """A layer that strict mode requires is missing on this host.

    Not retriable: the host will not grow the layer by itself.
    """

    retriable = False

    def __init__(self, missing: list[LayerStatus]) -> None:
        self.missing = tuple(missing)
        reasons = "; ".join(f"{layer.name}: {layer.detail}" for layer in missing)
        super().__init__(f"isolation layers unavailable ({reasons})")


@dataclass(frozen=True)
class LayerStatus:
    """One isolation layer as found on this host (``rewardbus doctor`` prints these)."""

    name: str
    active: bool
    detail: str
    required: bool = False


def _default_cache_dir() -> Path:
    return cache_root(os.environ)


@dataclass(frozen=True)
class JailConfig:
    """How executions are isolated. Built once at the edge, passed down.

    ``disabled`` switches layers off on purpose (benchmarks, debugging); a
    disabled required layer makes strict mode refuse like a missing one.
    A *slot* (a resident spawner in its own cgroups) runs one execution at a
    time; ``reuse_slots`` keeps emptied slots for the next execution (at most
    ``max_idle_slots`` of them), which avoids a cgroup join per execution.
    ``cgroup_parent`` is where per-execution cgroups go, relative to the
    worker's own cgroup (cgroup v1: in each controller's hierarchy; v2: next to
    the worker's cgroup, because v2 forbids processes in inner nodes), unless
    ``cgroup_root`` names a delegated cgroup v2 directory to use directly.
    Network (with ``loopback``): a new net namespace costs more than any other
    layer (~1 ms of CPU to make and as much to take down), so consecutive
    executions of a slot, or of a warm zygote, share a (loopback-only) one only
    while they leave no trace in it: one that sent or received any packet, or
    left a socket alive, makes the next execution start in a new namespace,
    pristine as a cold run's. A program that keeps root never shares.
    ``fresh_net`` makes it a new namespace for every execution, used or not.
    ``pool`` configures warm pools (:class:`~sandbox_workers.pool.PoolConfig`).
    """

    strict: bool = True
    required: frozenset[str] = DEFAULT_REQUIRED
    disabled: frozenset[str] = frozenset()
    uid: int = 65534
    gid: int = 65534
    cache_dir: Path = field(default_factory=_default_cache_dir)
    work_root: Path | None = None
    cgroup_parent: str = "rewardbus"
    cgroup_root: Path | None = None
    system_mounts: tuple[str, ...] = DEFAULT_SYSTEM_MOUNTS
    extra_mounts: tuple[BindMount, ...] = ()
    cpu_cores: float | None = 1.0
    tmp_mb: int = 64
    max_inodes: int = 16384
    max_open_files: int = 1024
    loopback: bool = True
    fresh_net: bool = False
    hostname: str = "sandbox"
    path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    setup_timeout_s: float = 10.0
    kill_grace_s: float = 1.0
    collect_bytes: int = 16 << 20
    reuse_slots: bool = True
    max_idle_slots: int = 64
    pool: PoolConfig = field(default_factory=PoolConfig)

    def __post_init__(self) -> None:
        unknown = (self.required | self.disabled) - set(ALL_LAYERS)
        if unknown:
            raise ValueError(f"unknown isolation layers: {sorted(unknown)}")
        if self.cpu_cores is not None and self.cpu_cores <= 0:
            raise ValueError("cpu_cores must be positive (or None for no quota)")

    @property
    def bin_dir(self) -> Path:
        """Where the compiled launcher and layer library are cached."""
        return self.cache_dir / "bin"

    @property
    def root_mountpoint(self) -> Path:
        """Empty host directory each jail mounts its private root on (in its own namespace)."""
        return self.cache_dir / "jail-root"
