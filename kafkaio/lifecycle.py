"""Start/stop, written once: a base class for things that connect, and a helper for many."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator
from typing import Self

from kafkaio.protocols import Startable

__all__ = ["Lifecycle", "running"]


class Lifecycle(abc.ABC):
    """``start()``/``stop()`` and the ``async with`` that pairs them."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect (and start whatever runs in the background)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Flush, stop the background work, disconnect."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


@contextlib.asynccontextmanager
async def running(*parts: Startable) -> AsyncIterator[None]:
    """Start ``parts`` in order; on the way out stop the started ones in reverse order.

    A part that fails to start stops the ones before it, and the error propagates.
    """
    async with contextlib.AsyncExitStack() as stack:
        for part in parts:
            await part.start()
            stack.push_async_callback(part.stop)
        yield
