"""What every tool the project runs as a child (Jaeger, Prometheus) shares.

A subclass starts ``_proc`` (a :class:`~rewardbus.runtime.reaped_child.ReapedChild` logging
to ``_log`` inside ``_workdir``) in its own ``start``; this base waits for it, stops
it (SIGTERM, a grace period, then SIGKILL), removes its directory and makes it a
sync and async context manager. The embedded Kafka broker runs its JVM as the same
kind of child, so spawning, reaping and stopping have one implementation.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import IO

from rewardbus.runtime.reaped_child import ReapedChild
from rewardbus.runtime.service import BlockingService

__all__ = ["EXIT_GRACE_S", "ChildProcess", "log_tail"]

EXIT_GRACE_S = 10.0
_LOG_TAIL_BYTES = 3000


def log_tail(path: Path | None) -> str:
    """The end of a child's log (start-up errors name the setting or port that failed)."""
    if path is None or not path.exists():
        return "(no log)"
    try:
        data = path.read_bytes()[-_LOG_TAIL_BYTES:]
    except OSError:
        return "(no log)"
    return data.decode("utf-8", errors="replace").strip() or "(empty log)"


class ChildProcess(BlockingService):
    """The lifecycle half of a supervised child process; subclasses define ``start``."""

    def __init__(self) -> None:
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._log: IO[bytes] | None = None
        self._proc: ReapedChild | None = None

    def start(self) -> None:
        raise NotImplementedError

    async def astart(self) -> None:
        """``start`` off the event loop (it blocks until the child is ready)."""
        await asyncio.to_thread(self.start)

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait for the process to exit; its status, or None on timeout."""
        return self._proc.wait(timeout_s) if self._proc is not None else None

    def stop(self, grace_s: float = EXIT_GRACE_S) -> None:
        """SIGTERM, wait ``grace_s``, then SIGKILL; remove the work directory. Idempotent."""
        self._reap(grace_s)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def _reap(self, grace_s: float = EXIT_GRACE_S) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.terminate(grace_s)
