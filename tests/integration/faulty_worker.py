"""A real sandbox worker process with one injected fault, for the quarantine tests only.

No completion is known today that crashes or wedges the worker itself (the two that
did, a list nested past the recursion limit and a fence line that made the code
extractor's regex backtrack for hours, are fixed), so the test that a record killing
worker after worker is quarantined needs one made on purpose. This is the real worker
(``run_worker``, the strict jail, the real broker) with its runner wrapped: a
completion whose ``attributes["fault"]`` is

- ``"bug"`` makes judging raise an exception that is not ours (as the RecursionError
  did): the worker logs it, drains, leaves the group and exits non-zero;
- ``"abort"`` kills the process on the spot (SIGABRT), as a crash in native code would:
  nothing is drained or committed, and the group notices at the session timeout;
- ``"wedge"`` blocks the event loop for good (a synchronous call that never returns):
  the loop watchdog (``sandbox_workers.watchdog``, as ``rewardbus worker`` runs it,
  here after ``STALL_S`` seconds) ends the process with status 70.

Usage: ``python tests/integration/faulty_worker.py BOOTSTRAP PREFIX GROUP WORKER_ID STALL_S``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from rewardbus.wiring import SandboxOptions, build_executor
from sandbox_workers.service import CompletionRunner, WorkerConfig, run_worker
from sandbox_workers.watchdog import watching_the_loop
from schemas import Completion, KafkaSettings, RewardEvent, TestSuite, Topics


class FaultyRunner:
    """The real executor, except for completions that ask for a fault."""

    def __init__(self, runner: CompletionRunner) -> None:
        self._runner = runner

    @property
    def languages(self) -> dict[str, str]:
        return self._runner.languages

    async def run(self, completion: Completion, suite: TestSuite | None = None) -> RewardEvent:
        fault = completion.attributes.get("fault")
        if fault == "bug":
            raise RuntimeError(f"injected bug judging {completion.sample_id}")
        if fault == "abort":
            os.abort()
        if fault == "wedge":
            time.sleep(24 * 3600)  # noqa: ASYNC251 -- the wedge: it blocks the loop on purpose
        return await self._runner.run(completion, suite)


async def _serve(bootstrap: str, prefix: str, group: str, worker_id: str, stall_s: str) -> None:
    kafka = KafkaSettings(bootstrap, topics=Topics(prefix=prefix), client_id=worker_id)
    executor = build_executor(SandboxOptions(strict=True, worker_id=worker_id))
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set_result, None)
    config = WorkerConfig(group_id=group, worker_id=worker_id, concurrency=1)
    try:
        async with watching_the_loop(float(stall_s)):
            await run_worker(kafka, config, FaultyRunner(executor), shutdown=stop)
    finally:
        await executor.aclose()


if __name__ == "__main__":
    asyncio.run(_serve(*sys.argv[1:6]))
