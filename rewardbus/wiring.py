"""Wiring: the only place where components are built and connected."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from rewardbus.errors import Unavailable
from sandbox_workers import Executor, ExecutorConfig, JailConfig, JailSandbox, SandboxFault
from sandbox_workers.jail import IsolationUnavailable, PoolConfig
from sandbox_workers.judging.harness import kept_harness
from sandbox_workers.languages.python import BOOTSTRAPS
from sandbox_workers.tools import LiveSession, SessionFactory, SessionLimits

__all__ = [
    "NoLiveSessions",
    "SandboxOptions",
    "SandboxUnavailable",
    "build_executor",
    "build_tool_sessions",
    "start_executor",
]


@dataclass(frozen=True)
class SandboxOptions:
    """Sandbox choices made on the command line."""

    strict: bool = True
    worker_id: str = ""
    concurrency: int = 1


class SandboxUnavailable(Unavailable):
    """Strict mode cannot start here; the message says which layers are missing and why."""


def build_executor(options: SandboxOptions) -> Executor:
    """The jail plus the judging executor on top of it.

    Strict mode raises :class:`SandboxUnavailable` if a required isolation layer is
    missing on this host.
    """
    # One warm interpreter per execution slot, plus one so a recycled zygote's
    # replacement can start while the others serve, pre-warmed for the first language;
    # twice that in all, so that a worker judging several interpreted languages at once
    # keeps zygotes for each (five languages in turn, two slots: 7.8 completions/s with
    # 3 zygotes, 14.1/s with 6; docs/languages.md).
    # Zygotes keep the judging harness's module loaded and run (PoolConfig.keep_code):
    # ~1.7-1.9 ms of CPU less per warm Python execution (docs/performance.md).
    cache_dir = JailConfig().cache_dir
    pool = PoolConfig(
        size=2 * (options.concurrency + 1),
        prewarm=0.25,
        keep_code=(kept_harness(cache_dir),),
        precompile=BOOTSTRAPS,
    )
    jail = JailConfig(strict=options.strict, pool=pool, cache_dir=cache_dir)
    try:
        sandbox = JailSandbox(jail)
    except IsolationUnavailable as exc:
        raise SandboxUnavailable(
            f"{exc}. `rewardbus doctor` explains each layer; --no-strict runs degraded"
            " and flags every reward event"
        ) from exc
    # Compiled artifacts (and Go's build cache) persist across worker restarts.
    config = ExecutorConfig(
        worker_id=options.worker_id, compile_cache_dir=jail.cache_dir / "executor"
    )
    return Executor(config, sandbox)


async def start_executor(
    options: SandboxOptions,
    *,
    build: Callable[[SandboxOptions], Executor] = build_executor,
) -> Executor:
    """:func:`build_executor` in a thread, for a caller on an event loop.

    Building takes seconds of blocking work (the launcher's gcc build, the namespace
    and cgroup probes, every toolchain's ``--version``); on the loop's thread it would
    stall everything else the loop serves meanwhile: signals, metrics, Kafka clients.
    ``build`` is the factory (tests pass a fake one).
    """
    return await asyncio.to_thread(build, options)


class NoLiveSessions:
    """A session factory that has none to give: every stateful tool call is a sandbox_error.

    What a worker whose executor does not run on the jail (a test's fake one) gets;
    stateless tool calls work without it.
    """

    async def start_session(self, limits: SessionLimits) -> LiveSession:
        """Refuse, as a fault of the sandbox (the caller sees sandbox_error, not a crash)."""
        raise SandboxFault("this worker has no live tool sessions (its sandbox is not the jail)")


def build_tool_sessions(executor: Executor) -> SessionFactory:
    """Where the worker's live tool sessions come from: the jail the executor runs on
    (``JailSandbox.start_session``), so sessions and executions share its slots, its
    layers and its closing."""
    sandbox = executor.sandbox
    return sandbox if isinstance(sandbox, JailSandbox) else NoLiveSessions()
