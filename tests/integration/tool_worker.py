"""A real worker's tool service in a process of its own, for the tool-call integration tests.

The tool service as ``rewardbus worker`` runs it (``run_tool_service``, the real broker,
the strict jail's executor for stateless calls, the jail's live sessions from
``rewardbus.wiring.build_tool_sessions``), without the completion loop beside it.

It prints ``ready`` once it is in its group. Usage:
``python tests/integration/tool_worker.py BOOTSTRAP PREFIX GROUP WORKER_ID MAX_SESSIONS``.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from rewardbus.wiring import SandboxOptions, build_executor, build_tool_sessions
from sandbox_workers.service import WorkerConfig
from sandbox_workers.tools.service import ToolConfig, run_tool_service
from schemas import KafkaSettings, Topics


async def _serve(
    bootstrap: str, prefix: str, group: str, worker_id: str, max_sessions: str
) -> None:
    kafka = KafkaSettings(bootstrap, topics=Topics(prefix=prefix), client_id=worker_id)
    options = SandboxOptions(strict=True, worker_id=worker_id)
    executor = await asyncio.to_thread(build_executor, options)
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[None] = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    ready = asyncio.Event()

    async def announce() -> None:
        await ready.wait()
        print(f"tool worker {worker_id} ready", flush=True)

    announcer = asyncio.create_task(announce())
    try:
        await run_tool_service(
            kafka,
            WorkerConfig(group_id=group, worker_id=worker_id),
            ToolConfig(max_sessions=int(max_sessions), concurrency=2),
            factory=build_tool_sessions(executor),
            runner=executor,
            shutdown=stop,
            ready=ready,
        )
    finally:
        announcer.cancel()
        await executor.aclose()


if __name__ == "__main__":
    asyncio.run(_serve(*sys.argv[1:6]))
