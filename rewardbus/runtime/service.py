"""A service whose start() and stop() block, used as a sync or an async context manager.

The embedded broker, the broker cluster and the Jaeger/Prometheus supervisors each
start a child (or several) and wait until it serves. ``async with`` runs both off the
event loop; a cancelled start-up is stopped and cleaned up before the cancel goes on.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Self

__all__ = ["BlockingService"]


class BlockingService:
    """Subclasses define ``start`` (blocks until ready) and ``stop`` (idempotent)."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        try:
            await asyncio.to_thread(self.start)
        except asyncio.CancelledError:
            # The start-up thread carries on after a cancel; stop() aborts and cleans it up.
            await asyncio.to_thread(self.stop)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)
