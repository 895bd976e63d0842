"""One way to wait for a condition in a test: poll it against a deadline, never a fixed sleep.

A test that waits names what it waits for; past the deadline it fails saying so.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

__all__ = ["until", "until_sync"]

What = str | Callable[[], str]


async def until(
    check: Callable[[], bool | Awaitable[bool]],
    what: What,
    *,
    timeout_s: float = 30,
    every_s: float = 0.01,
    ignoring: tuple[type[BaseException], ...] = (),
) -> None:
    """Poll ``check`` (plain or async) until it holds; fail after ``timeout_s``.

    ``what`` names the awaited condition in the failure (a callable is asked at
    failure time, to report the state reached). ``ignoring``: exceptions that
    mean "not yet" (a server that is not answering yet).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
        except ignoring:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(what, timeout_s))
        await asyncio.sleep(every_s)


def until_sync(
    check: Callable[[], bool],
    what: What,
    *,
    timeout_s: float = 30,
    every_s: float = 0.1,
    ignoring: tuple[type[BaseException], ...] = (),
) -> None:
    """``until`` for code outside an event loop: blocks between polls."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except ignoring:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(what, timeout_s))
        time.sleep(every_s)


def _timed_out(what: What, timeout_s: float) -> str:
    named = what() if callable(what) else what
    return f"timed out after {timeout_s:g} s waiting for {named}"
