"""The loop watchdog: a wedged event loop is noticed from another thread; a turning one is not."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sandbox_workers.watchdog import LoopWatchdog


async def test_a_wedged_loop_is_reported_with_how_long_it_stalled() -> None:
    stalls: list[float] = []
    called = threading.Event()

    def on_stall(stalled_s: float) -> None:
        stalls.append(stalled_s)
        called.set()

    watchdog = LoopWatchdog(0.2, on_stall=on_stall)
    await watchdog.start()
    await asyncio.sleep(0)  # the stamping task runs once
    # Blocks the loop, as a runaway synchronous call would, until the watchdog fires.
    assert called.wait(timeout=10)
    await watchdog.stop()
    assert len(stalls) == 1 and stalls[0] >= 0.2


async def test_a_turning_loop_is_left_alone() -> None:
    stalls: list[float] = []
    watchdog = LoopWatchdog(2.0, on_stall=stalls.append)
    await watchdog.start()
    # 3 s of short awaits: the loop turns every 50 ms, never blocked for long.
    for _ in range(60):
        await asyncio.sleep(0.05)
    await watchdog.stop()
    assert stalls == []


def test_the_stall_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        LoopWatchdog(0)
