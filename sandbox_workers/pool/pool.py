"""The policy over zygotes: how many, when to start one, when to wait, when to retire one.

Zygotes are grouped by :class:`~sandbox_workers.pool.profile.Profile`; at most
``PoolConfig.size`` exist at once, over all profiles (an idle zygote of the
least recently used profile makes room for a new profile). Starting one is
the :class:`~sandbox_workers.jail.JailSandbox`'s business (a ``ZygoteStarter``);
this module never touches a process itself. It is generic in the jail's cgroup
slot type only to hand the jail back its own zygotes' slots, fully typed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from sandbox_workers.pool.config import PoolConfig
from sandbox_workers.pool.profile import PooledCommand, Profile, pooled_command
from sandbox_workers.pool.slot import SlotCgroup
from sandbox_workers.pool.zygote import Zygote
from sandbox_workers.sandbox import ExecRequest, SandboxFault

__all__ = ["PoolStats", "WarmPool", "ZygoteStarter"]

_log = logging.getLogger(__name__)

_Cgroup = TypeVar("_Cgroup", bound=SlotCgroup)

ZygoteStarter = Callable[[Profile], Awaitable[Zygote[_Cgroup]]]


@dataclass
class PoolStats:
    """Counters since the pool was made (for metrics and benchmarks)."""

    served: int = 0  # executions a zygote ran
    cold: int = 0  # poolable requests that ran cold (pool exhausted or failing)
    started: int = 0
    start_failures: int = 0
    recycled: int = 0  # retired after max_uses
    discarded: int = 0  # died, misbehaved, or left something in its slot


class _Group(Generic[_Cgroup]):
    """The zygotes of one profile."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.idle: list[Zygote[_Cgroup]] = []
        self.busy: set[Zygote[_Cgroup]] = set()
        self.starting: set[asyncio.Task[None]] = set()
        self.retry_at = 0.0
        self.last_used = time.monotonic()

    @property
    def live(self) -> int:
        return len(self.idle) + len(self.busy)


class WarmPool(Generic[_Cgroup]):
    """Hands out zygotes for pooled requests; see :class:`~sandbox_workers.pool.PoolConfig`."""

    def __init__(
        self, config: PoolConfig, interpreters: frozenset[str], start: ZygoteStarter[_Cgroup]
    ) -> None:
        self._config = config
        self._interpreters = interpreters
        self._start = start
        self._groups: dict[Profile, _Group[_Cgroup]] = {}
        self._closed = False
        self.stats = PoolStats()

    def command(self, request: ExecRequest) -> PooledCommand | None:
        """The request as a zygote command, or None when it is not for a pooled interpreter."""
        return pooled_command(request, self._interpreters, fork_at_open=self._config.fork_at_open)

    async def acquire(self, profile: Profile) -> Zygote[_Cgroup] | None:
        """An idle zygote of ``profile`` (now busy), or None: run this request cold.

        A profile with no live zygote yet waits for its pre-warm starts: nothing
        else would free up soon. Otherwise, with every zygote busy, one more is
        started in the background (within the pool's size) and None is returned.
        """
        group = self._group(profile)
        group.last_used = time.monotonic()
        zygote = self._take_idle(group)
        if zygote is None and group.live == 0 and self._config.prewarm_count > 0:
            self._fill(group, self._prewarm_target())
            if group.starting:
                await asyncio.wait(set(group.starting))  # never cancels the starts
                zygote = self._take_idle(group)
        elif zygote is None:
            self._fill(group, group.live + 1)
        if zygote is None:
            self.stats.cold += 1
            return None
        self.stats.served += 1
        return zygote

    def release(self, zygote: Zygote[_Cgroup], *, reusable: bool) -> None:
        """Take a zygote back after an execution; ``reusable``: it ended cleanly and healthy."""
        group = self._groups.get(zygote.profile)
        if group is not None:
            group.busy.discard(zygote)
        if group is None or self._closed:
            zygote.close()
            return
        if reusable and zygote.uses < self._config.max_uses:
            group.idle.append(zygote)
            return
        if reusable:
            self.stats.recycled += 1
        else:
            self.stats.discarded += 1
            _log.info("warm pool: discarding a zygote that died or left something behind")
        zygote.close()
        self._fill(group, group.live + 1)  # a replacement, in the background

    async def warm(self, profile: Profile, count: int | None = None) -> int:
        """Start zygotes for ``profile`` up to ``count`` (default: the pre-warm count).

        Returns how many are live once the starts have finished.
        """
        group = self._group(profile)
        self._fill(group, self._config.prewarm_count if count is None else count)
        if group.starting:
            await asyncio.wait(set(group.starting))
        return group.live

    def resident_pids(self) -> frozenset[int]:
        """Host pids of every process the pool keeps between executions."""
        pids: set[int] = set()
        for group in self._groups.values():
            for zygote in (*group.idle, *group.busy):
                pids |= zygote.resident | {zygote.pid}
        return frozenset(pids)

    def close(self) -> None:
        """Stop every zygote and cancel pending starts (their slots go with them)."""
        self._closed = True
        for group in self._groups.values():
            for task in group.starting:
                task.cancel()
            for zygote in (*group.idle, *group.busy):
                zygote.close()
            group.idle.clear()
            group.busy.clear()

    # ------------------------------------------------------------------ internals

    def _group(self, profile: Profile) -> _Group[_Cgroup]:
        group = self._groups.get(profile)
        if group is None:
            group = self._groups[profile] = _Group(profile)
        return group

    def _take_idle(self, group: _Group[_Cgroup]) -> Zygote[_Cgroup] | None:
        while group.idle:
            zygote = group.idle.pop()  # the most recently used: its pages are warm
            if zygote.alive:
                group.busy.add(zygote)
                return zygote
            self.stats.discarded += 1
            zygote.close()
        return None

    def _prewarm_target(self) -> int:
        """How many zygotes a profile seen for the first time starts (and waits for).

        The pre-warm count, but only into free room: in a full pool it starts one,
        retiring one idle zygote of the least recently used other profile. Otherwise
        profiles used in turn (a batch of five languages) would each retire the
        others' zygotes wholesale, and nearly every request would wait for a start
        (measured: 104 starts for 50 mixed completions, see docs/languages.md).
        """
        free = self._config.size - self._total()
        return max(1, min(self._config.prewarm_count, free))

    def _total(self) -> int:
        return sum(group.live + len(group.starting) for group in self._groups.values())

    def _make_room(self, wanted: _Group[_Cgroup]) -> bool:
        """Retire an idle zygote of the least recently used other profile; False if none."""
        others = [g for g in self._groups.values() if g is not wanted and g.idle]
        if not others:
            return False
        victim = min(others, key=lambda g: g.last_used)
        victim.idle.pop(0).close()  # its least recently used zygote
        return True

    def _fill(self, group: _Group[_Cgroup], target: int) -> None:
        """Start zygotes in the background until the group has ``target`` (live or starting)."""
        if self._closed or time.monotonic() < group.retry_at:
            return
        while group.live + len(group.starting) < target:
            if self._total() >= self._config.size and not self._make_room(group):
                return
            task = asyncio.get_running_loop().create_task(self._start_one(group))
            group.starting.add(task)
            task.add_done_callback(functools.partial(self._started, group))

    async def _start_one(self, group: _Group[_Cgroup]) -> None:
        try:
            zygote = await self._start(group.profile)
        except SandboxFault as exc:
            self.stats.start_failures += 1
            group.retry_at = time.monotonic() + self._config.retry_after_s
            _log.warning(
                "warm pool: a zygote did not start (%s); that profile runs cold for %.0f s",
                exc,
                self._config.retry_after_s,
            )
            return
        if self._closed:
            zygote.close()
            return
        self.stats.started += 1
        group.idle.append(zygote)

    def _started(self, group: _Group[_Cgroup], task: asyncio.Task[None]) -> None:
        group.starting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # A bug, not a host problem: say so loudly, and stop trying for a while.
            group.retry_at = time.monotonic() + self._config.retry_after_s
            _log.error("warm pool: zygote start crashed", exc_info=task.exception())
