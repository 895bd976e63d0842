"""A TEST DOUBLE of ``consumers.tool_client`` (ToolClient, SharedToolClients), same API.

It answers :class:`~schemas.tools.ToolResult`s by running each python session's
cells in a child interpreter of its own on this machine (namespace kept between
cells; CPU time per cell by ``RLIMIT_CPU``, memory by ``RLIMIT_AS``): no Kafka, no
jail, no worker. It stands in until the real client and the workers' tool service
land; ``tests/verl/test_verl_tool.py`` gets it from ONE fixture (``tool_backend``),
which is where the real client replaces it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass, field

from schemas import KafkaSettings
from schemas.tools import ToolLimits, ToolResult

# The session's interpreter: reads one JSON cell a line, answers one JSON line.
_SESSION_PROGRAM = r"""
import contextlib, io, json, resource, signal, sys, traceback

class CpuLimit(BaseException):
    pass

def on_cpu_limit(signum, frame):
    raise CpuLimit

signal.signal(signal.SIGXCPU, on_cpu_limit)
memory = int(sys.argv[1]) * 1024 * 1024
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
namespace = {"__name__": "__main__"}
answers = sys.stdout
for line in sys.stdin:
    cell = json.loads(line)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    budget = int(usage.ru_utime + usage.ru_stime + cell["time_s"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (budget, resource.RLIM_INFINITY))
    out, err, status = io.StringIO(), io.StringIO(), "ok"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(compile(cell["code"], "<cell>", "exec"), namespace)
    except CpuLimit:
        status = "time_limit"
    except MemoryError:
        status = "memory_limit"
    except BaseException as exc:
        status = "error"
        err.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next)))
    resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    answer = {"status": status, "stdout": out.getvalue(), "stderr": err.getvalue()}
    answers.write(json.dumps(answer) + "\n")
    answers.flush()
"""


@dataclass
class ToolClientConfig:
    name: str = "tool-double"
    timeout_s: float = 60.0
    limits: ToolLimits = field(default_factory=ToolLimits)


class ToolClient:
    """Runs cells in one child interpreter per session; ``ended`` records ``end`` calls."""

    def __init__(self, kafka: KafkaSettings, config: ToolClientConfig | None = None) -> None:
        self.kafka = kafka
        self.config = config or ToolClientConfig()
        self.ended: list[str] = []
        self._sessions: dict[str, asyncio.subprocess.Process] = {}
        self._seq: dict[str, int] = {}

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        for session_id in list(self._sessions):
            await self._kill(session_id)

    async def run(
        self,
        session_id: str,
        code: str,
        *,
        language: str = "python",
        limits: ToolLimits | None = None,
        stateless: bool = False,
        timeout_s: float | None = None,
    ) -> ToolResult:
        limits = limits or self.config.limits
        seq = self._seq[session_id] = self._seq.get(session_id, 0) + 1
        if language != "python":
            return ToolResult(
                call_id="", session_id=session_id, seq=seq, status="rejected", message=language
            )
        started = time.perf_counter()
        process = self._sessions.get(session_id) or await self._spawn(session_id, limits)
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write((json.dumps({"code": code, "time_s": limits.time_s}) + "\n").encode())
        await process.stdin.drain()
        line = await asyncio.wait_for(process.stdout.readline(), timeout_s or self.config.timeout_s)
        answer = json.loads(line)
        return ToolResult(
            call_id=f"{session_id}:{seq}",
            session_id=session_id,
            seq=seq,
            status=answer["status"],
            stdout=answer["stdout"],
            stderr=answer["stderr"],
            exec_ms=(time.perf_counter() - started) * 1000,
        )

    async def end(self, session_id: str) -> None:
        self.ended.append(session_id)
        await self._kill(session_id)

    async def _spawn(self, session_id: str, limits: ToolLimits) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _SESSION_PROGRAM,
            str(limits.memory_mb),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        self._sessions[session_id] = process
        return process

    async def _kill(self, session_id: str) -> None:
        process = self._sessions.pop(session_id, None)
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()


class SharedToolClients:
    """One started client per event loop (the double keeps just one)."""

    def __init__(self, kafka: KafkaSettings, config: ToolClientConfig | None = None) -> None:
        self._client = ToolClient(kafka, config)

    async def get(self) -> ToolClient:
        return self._client

    async def aclose(self) -> None:
        await self._client.stop()
