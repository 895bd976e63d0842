"""`serve`: run one embedded broker until a shutdown trigger fires (`rewardbus broker`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from rewardbus.runtime.broker.broker_log import log_excerpt
from rewardbus.runtime.broker.config import BrokerConfig
from rewardbus.runtime.broker.embedded import EmbeddedBroker
from rewardbus.runtime.broker.errors import BrokerError

__all__ = ["serve"]


async def serve(
    config: BrokerConfig,
    *,
    shutdown: Awaitable[object],
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Run a broker until `shutdown` completes, then stop it (the CLI's `rewardbus broker`).

    `on_ready` receives the bootstrap address once clients can connect. A shutdown during
    start-up aborts the start-up. Raises BrokerError if the broker cannot start or exits on
    its own; `shutdown` is then cancelled. The broker is stopped however this returns.
    """
    broker = EmbeddedBroker(config)
    stop_requested = asyncio.ensure_future(shutdown)
    try:
        if await _start_unless_stopped(broker, stop_requested):
            if on_ready is not None:
                on_ready(broker.bootstrap_servers)
            await _run_until_stopped(broker, stop_requested)
    finally:
        stop_requested.cancel()
        await asyncio.to_thread(broker.stop)


async def _first_done(*futures: asyncio.Future[Any]) -> None:
    await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)


async def _start_unless_stopped(
    broker: EmbeddedBroker, stop_requested: asyncio.Future[object]
) -> bool:
    """Start the broker; False when shutdown came first (the start-up is then aborted)."""
    started = asyncio.ensure_future(asyncio.to_thread(broker.start))
    try:
        await _first_done(stop_requested, started)
    except asyncio.CancelledError:
        await _abort_start(broker, started)
        raise
    if not started.done():
        await _abort_start(broker, started)
        return False
    started.result()
    return not stop_requested.done()


async def _abort_start(broker: EmbeddedBroker, started: asyncio.Future[None]) -> None:
    # stop() makes a start-up under way give up; then collect its "aborted" error.
    await asyncio.to_thread(broker.stop)
    with contextlib.suppress(BrokerError):
        await started


async def _run_until_stopped(
    broker: EmbeddedBroker, stop_requested: asyncio.Future[object]
) -> None:
    exited = asyncio.ensure_future(asyncio.to_thread(broker.wait))
    try:
        await _first_done(stop_requested, exited)
    finally:
        # Its thread returns as soon as stop() reaps the broker.
        exited.cancel()
    if stop_requested.done():
        if not stop_requested.cancelled():
            stop_requested.result()  # a failing shutdown trigger is the caller's error to see
        return
    log = broker.log_path
    excerpt = log_excerpt(log) if log is not None else "(no broker log)"
    raise BrokerError(
        f"the Kafka broker exited unexpectedly with status {exited.result()}; {excerpt}"
    )
