"""A watchdog that ends a worker process whose event loop has stopped turning.

A completion that wedges the worker itself (a synchronous call that never returns:
a regex backtracking for hours, as the code extractor once did) stops the asyncio
loop, and with it the consumer's heartbeats and every execution. The group notices
at the session timeout and hands the record to another member, which wedges in turn,
while the wedged process lives on, holding memory and a pod, and never exits, so the
quarantine (``sandbox_workers.attempts``: a record on which N workers died is
dead-lettered unjudged) never counts it.

``LoopWatchdog`` turns a wedge into a death: a task stamps the time every
``stall_s / 4``; a thread checks the stamp as often, and once it is ``stall_s`` old
dumps every thread's stack to stderr (where the wedge is) and ends the process with
``EXIT_STALLED``, without running cleanup that would wait on the stuck loop. The
supervisor (Kubernetes, compose, ``rewardbus.runtime.local``) restarts it; the record is
redelivered and counted.

Only process entry points use it (``rewardbus worker``): in a test's or a trainer's
process, ending the process would be wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import NoReturn

__all__ = ["EXIT_STALLED", "LoopWatchdog", "watching_the_loop"]

log = logging.getLogger(__name__)

EXIT_STALLED = 70  # EX_SOFTWARE


def _die(stalled_s: float) -> NoReturn:
    log.critical("event loop stalled for %.1f s: exiting %d", stalled_s, EXIT_STALLED)
    print(f"rewardbus: event loop stalled for {stalled_s:.1f} s; stacks:", file=sys.stderr)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(EXIT_STALLED)


class LoopWatchdog:
    """Calls ``on_stall`` (default: end the process) once the running loop has not
    run its stamping task for ``stall_s`` seconds."""

    def __init__(self, stall_s: float, on_stall: Callable[[float], object] = _die) -> None:
        if stall_s <= 0:
            raise ValueError("stall_s must be positive")
        self.stall_s = stall_s
        self._on_stall = on_stall
        self._stamp = time.monotonic()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start stamping on the running loop, and the watching thread."""
        self._stamp = time.monotonic()
        self._task = asyncio.create_task(self._tick(), name="loop-watchdog-stamp")
        self._thread.start()

    async def stop(self) -> None:
        self._stopped.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.to_thread(self._thread.join)

    async def _tick(self) -> None:
        while True:
            self._stamp = time.monotonic()
            await asyncio.sleep(self.stall_s / 4)

    def _watch(self) -> None:
        while not self._stopped.wait(self.stall_s / 4):
            stalled = time.monotonic() - self._stamp
            if stalled >= self.stall_s:
                self._on_stall(stalled)
                return


@contextlib.asynccontextmanager
async def watching_the_loop(stall_s: float) -> AsyncIterator[None]:
    """The block runs under a :class:`LoopWatchdog` (none when ``stall_s`` is 0)."""
    if stall_s == 0:
        yield
        return
    watchdog = LoopWatchdog(stall_s)
    await watchdog.start()
    try:
        yield
    finally:
        await watchdog.stop()
