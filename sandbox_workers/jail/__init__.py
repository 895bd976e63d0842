"""The jail: real isolation behind :class:`~sandbox_workers.sandbox.Sandbox`.

Layers (each detected at start-up, see :func:`detect_layers`): pid/mount/net/ipc/uts
namespaces; a private read-only root with a size-capped tmpfs /work and /tmp;
cgroup v1 or v2 memory (+swap), pids and cpu limits; rlimits; an unprivileged
uid; a seccomp filter; a scrubbed environment; capped output; on timeout the
whole pid namespace is killed and reaped. The per-process layers live in C
(``sandbox_workers/native``), compiled once into the ``rbjail`` launcher and into
``librbjail.so`` for forked children of a warm interpreter.

Warm pools (:mod:`sandbox_workers.pool`) are wired in here
(:mod:`.zygotes`): the jail imports the pool, never the other way round.
:class:`PoolConfig` lives with the pool and is re-exported here, as part of
:class:`JailConfig`.
"""

from sandbox_workers.jail.build import Binaries, BuildError, build
from sandbox_workers.jail.config import (
    ALL_LAYERS,
    DEFAULT_REQUIRED,
    DEFAULT_SYSTEM_MOUNTS,
    IsolationUnavailable,
    JailConfig,
    LayerStatus,
)
from sandbox_workers.jail.detect import detect_layers
from sandbox_workers.jail.jail_sandbox import JailSandbox
from sandbox_workers.jail.layers import LayerLibrary, load_layers
from sandbox_workers.pool.config import PoolConfig

__all__ = [
    "ALL_LAYERS",
    "DEFAULT_REQUIRED",
    "DEFAULT_SYSTEM_MOUNTS",
    "Binaries",
    "BuildError",
    "IsolationUnavailable",
    "JailConfig",
    "JailSandbox",
    "LayerLibrary",
    "LayerStatus",
    "PoolConfig",
    "build",
    "detect_layers",
    "load_layers",
]
