"""Signals, for the commands that run until stopped: the first SIGTERM or SIGINT drains."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading

__all__ = ["shutdown_future"]

log = logging.getLogger("rewardbus")


def shutdown_future(stop_timeout_s: float | None = None) -> asyncio.Future[None]:
    """A future resolved by the first SIGTERM or SIGINT (a second one kills hard).

    With ``stop_timeout_s``, a process still running that long after the signal exits
    with status 1 (as an orchestrator's grace period would end it): a service whose
    broker is gone can otherwise wait on it for ever. A thread keeps the time, so a
    blocked event loop cannot hold it up.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def overdue() -> None:
        log.error("not stopped %.0f s after the signal: exiting", stop_timeout_s)
        logging.shutdown()
        os._exit(1)

    def trigger(signum: int) -> None:
        if fut.done():
            os._exit(128 + signum)
        log.info("received %s: shutting down", signal.Signals(signum).name)
        fut.set_result(None)
        if stop_timeout_s is not None:
            timer = threading.Timer(stop_timeout_s, overdue)
            timer.daemon = True
            timer.start()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, trigger, signum)
    return fut
