"""The warm pool wired to the jail: zygotes started in its slots, and what each run tells one.

:mod:`sandbox_workers.pool` knows nothing of the jail; this module is where the
two meet (it imports both, and the pool imports neither it nor the jail).
:func:`warm_pool` builds the pool of a :class:`~sandbox_workers.jail.JailSandbox`
with a :class:`ZygoteStarter`, which starts each zygote in a fresh slot with
the launcher's options for a zygote's jail; :func:`execution_spec` turns a
request into what the zygote's pid 1 and program need.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from importlib import resources
from pathlib import Path

from sandbox_workers.jail.build import Binaries
from sandbox_workers.jail.cgroups import CgroupLimits, CgroupSlot
from sandbox_workers.jail.config import JailConfig
from sandbox_workers.jail.options import (
    WORKDIR,
    LauncherOptions,
    cpu_ms,
    environment,
    wall_cap_ms,
    wall_ms,
)
from sandbox_workers.jail.slots import Slot, SlotPool
from sandbox_workers.pool import (
    ExecutionSpec,
    PoolConfig,
    PooledCommand,
    Profile,
    WarmPool,
    Zygote,
    shadowed_modules,
)
from sandbox_workers.sandbox import ExecRequest

__all__ = ["ZygoteStarter", "base_python", "execution_spec", "warm_pool"]

_log = logging.getLogger(__name__)

# A zygote's jail has no time limit of its own (the launcher wants one: ~10 years,
# of CPU and of wall time: its executions' CPU adds up in the same slot).
_ZYGOTE_LIFETIME_MS = 10 * 365 * 24 * 3600 * 1000
# Where a fork-at-open zygote's jail shows librbjail-warm.so (preloaded).
_WARM_LIBRARY = "/.rbjail/warm.so"
# Where a Python zygote's jail shows the code files it keeps loaded (PoolConfig.keep_code).
_KEPT_CODE = "/.rbjail/kept"
# While it starts, a zygote imports modules: generous limits, replaced per execution.
_ZYGOTE_START_MEMORY = 512 << 20
_ZYGOTE_START_PROCESSES = 16


def warm_pool(
    config: JailConfig,
    options: LauncherOptions,
    slots: SlotPool,
    binaries: Binaries,
    held: set[Slot],
) -> WarmPool[CgroupSlot] | None:
    """The sandbox's warm pool, or None when it is off or this host cannot run zygotes.

    ``held``: where the starter keeps the slots of live or starting zygotes, for
    the sandbox to take down when it closes.
    """
    pool = config.pool
    if not pool.enabled:
        return None
    if not (options.on("namespaces") and options.on("mounts")):
        _log.info("warm pool off: zygotes need the namespaces and mounts layers")
        return None
    interpreters = frozenset(pool.interpreters or (base_python(),))
    starter = ZygoteStarter(config, options, slots, binaries, held)
    return WarmPool(pool, interpreters, starter)


def execution_spec(
    config: JailConfig,
    options: LauncherOptions,
    command: PooledCommand,
    request: ExecRequest,
    zygote: Zygote[CgroupSlot],
) -> ExecutionSpec:
    """The execution as the zygote's pid 1 and program need it."""
    # Without a memory cgroup, RLIMIT_AS is the limit: the zygote's mappings,
    # which the program inherits, come on top (a fresh interpreter has its own).
    rlimits = options.rlimit_values(request, extra_address_space=zygote.info.vsz_kb << 10)
    return ExecutionSpec(
        argv=request.argv,
        code=command.code,
        args=command.args,
        cpu_ms=cpu_ms(request),
        wall_ms=wall_ms(request),
        wall_cap_ms=wall_cap_ms(request),
        work_mb=request.workdir_mb,
        tmp_mb=config.tmp_mb,
        inodes=config.max_inodes,
        uid=config.uid,
        gid=config.gid,
        drop_uid=options.on("uid"),
        seccomp=options.on("seccomp"),
        loopback=config.loopback,
        rlimits=tuple(rlimits),
        shadow=tuple(shadowed_modules(request.files)),
    )


def base_python() -> str:
    """The worker's base interpreter (what the Python language runs), the default pooled one."""
    prefix = Path(sys.base_prefix).resolve()
    return str(prefix / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")


@functools.cache
def _zygote_source() -> str:
    return resources.files("sandbox_workers.pool").joinpath("zygote_main.py").read_text()


class ZygoteStarter:
    """Starts zygotes in fresh slots.

    Holds no reference to the sandbox: the sandbox's finaliser must not keep it alive.
    """

    def __init__(
        self,
        config: JailConfig,
        options: LauncherOptions,
        slots: SlotPool,
        binaries: Binaries,
        held: set[Slot],
    ) -> None:
        self._config = config
        self._static = options.static
        self._slots = slots
        self._binaries = binaries
        self._held = held  # slots of live or starting zygotes: close() takes them down

    async def __call__(self, profile: Profile) -> Zygote[CgroupSlot]:
        """Start one zygote of ``profile``; ZygoteFault (a SandboxFault) if it does not come up."""
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
        env = environment(self._config, dict(profile.env), WORKDIR)
        if profile.trigger is not None:
            # The interpreter runs the request's own command line and turns into
            # the zygote at its first open of the program (native/rbjail_warm.c),
            # which takes its variables out of its environment.
            options += ["--ro", str(self._binaries.warm), _WARM_LIBRARY]
            env["LD_PRELOAD"] = _WARM_LIBRARY
            env["RBJAIL_WARM_TRIGGER"] = profile.trigger
            env["RBJAIL_WARM"] = f"{int(self._config.fresh_net)} {int(self._config.loopback)}"
            if profile.on_read:
                env["RBJAIL_WARM_ON_READ"] = "1"
            command = [profile.interpreter, *profile.options]
        else:
            kept = [f"{_KEPT_CODE}/{i}.marshal" for i in range(len(pool.keep_code))]
            for host, target in zip(pool.keep_code, kept, strict=True):
                options += ["--ro", str(host), target]
            settings = json.dumps(
                {
                    "preload": list(pool.preload),
                    "keep_code": kept,
                    "precompile": list(pool.precompile),
                    "fresh_net": self._config.fresh_net,
                    "loopback": self._config.loopback,
                }
            )
            command = [profile.interpreter, *profile.options, "-c", _zygote_source(), settings]
        for key, value in env.items():
            options += ["--env", f"{key}={value}"]
        return [*options, "--", *command]
