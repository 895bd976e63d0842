"""The executor is built off the event loop: the loop keeps serving meanwhile."""

from __future__ import annotations

import asyncio
import threading
from typing import cast

from rewardbus.wiring import SandboxOptions, start_executor
from sandbox_workers import Executor

BUILT = cast(Executor, object())


async def test_the_loop_keeps_ticking_while_the_executor_is_built() -> None:
    """The fake factory returns only once the loop has ticked three times.

    Built on the loop's own thread, it would block the loop, the ticker could never
    run, and the factory's wait would run out: no timing of another program matters.
    """
    ticks = 0
    ticked = threading.Event()

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            if ticks >= 3:
                ticked.set()
            await asyncio.sleep(0)

    seen: list[SandboxOptions] = []

    def slow_factory(options: SandboxOptions) -> Executor:
        seen.append(options)
        if not ticked.wait(timeout=20):
            raise AssertionError("the event loop did not tick while the executor was built")
        return BUILT

    ticker = asyncio.create_task(tick())
    try:
        options = SandboxOptions(strict=False, worker_id="w")
        assert await start_executor(options, build=slow_factory) is BUILT
    finally:
        ticker.cancel()
    assert seen == [SandboxOptions(strict=False, worker_id="w")]
    assert ticks >= 3
