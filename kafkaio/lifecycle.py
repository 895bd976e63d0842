"""Start/stop, written once: a base class for things that connect, and a helper for many."""

from __future__ import annotations

import abc
import contextlib
from typing import Any, Self

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


def running(*parts: Startable) -> contextlib.AbstractAsyncContextManager[None]:
    """Start ``parts`` in order; on the way out stop the started ones in reverse order.

    A part that fails to start stops the ones before it, and the error propagates.
    """
    return _Running(parts)


class _Running(contextlib.AbstractAsyncContextManager[None]):
    # A class, not an @asynccontextmanager: clients are also stopped while their
    # loop shuts its async generators down (consumers.reward_client), and an async
    # generator begun then draws a ResourceWarning.

    def __init__(self, parts: tuple[Startable, ...]) -> None:
        self._parts = parts
        self._started = contextlib.AsyncExitStack()

    async def __aenter__(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            for part in self._parts:
                await part.start()
                stack.push_async_callback(part.stop)
            self._started = stack.pop_all()

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._started.__aexit__(*exc_info)
