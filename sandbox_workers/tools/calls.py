"""One decoded tool call, run: the session table, the replay protocol, stateless programs.

:class:`ToolCalls` turns a :class:`~schemas.ToolCall` into its
:class:`~schemas.ToolResult` and knows nothing of Kafka (the service,
:mod:`sandbox_workers.tools.service`, decodes, orders and replies). The calls of one
session must come to it one at a time, in order; those of different sessions may
overlap (at most ``concurrency`` cells run at once).

Everything a cell does is data in the result. A :class:`~sandbox_workers.sandbox.SandboxFault`
from a session (or from starting one) becomes ``sandbox_error``, the session dropped;
the caller's next call rebuilds it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
from opentelemetry import trace

from sandbox_workers.errors import SandboxWorkerError
from sandbox_workers.judgement import CompletionRunner
from sandbox_workers.languages import lookup
from sandbox_workers.sandbox import SandboxFault
from sandbox_workers.tools.replay import decide
from sandbox_workers.tools.session import CellResult, SessionFactory, SessionLimits
from sandbox_workers.tools.sessions import Held, SessionTable
from schemas import (
    Completion,
    IoSuite,
    Limits,
    RebuildReason,
    RewardEvent,
    ToolCall,
    ToolLimits,
    ToolResult,
    ToolStatus,
    Verdict,
)

__all__ = ["ToolCalls", "ToolOutcome", "session_limits"]

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)


@dataclass(frozen=True)
class ToolOutcome:
    """A call's result, and whether the session table saw a rebuild (for the metrics)."""

    result: ToolResult
    rebuild_reason: RebuildReason = ""


def session_limits(limits: ToolLimits) -> SessionLimits:
    """The session-wide part of a call's limits."""
    return SessionLimits(memory_mb=limits.memory_mb, lifetime_s=limits.lifetime_s)


class ToolCalls:
    """Runs tool calls against the held sessions (``table``), starting new ones with ``factory``.

    ``runner`` runs stateless calls as fresh programs (the worker's executor).
    """

    def __init__(
        self,
        *,
        table: SessionTable,
        factory: SessionFactory,
        runner: CompletionRunner,
        worker_id: str,
        concurrency: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.table = table
        self._factory = factory
        self._runner = runner
        self._worker_id = worker_id
        self._slots = asyncio.Semaphore(max(concurrency, 1))
        self._clock = clock

    async def run(self, call: ToolCall, *, partition: int) -> ToolOutcome:
        """The result of ``call`` (of ``partition``: its session is held for that partition)."""
        queue_ms = max(0.0, (self._clock() - call.created_at) * 1000)
        outcome = await self._run(call, partition)
        result = msgspec.structs.replace(
            outcome.result, queue_ms=round(queue_ms, 3), worker_id=self._worker_id
        )
        return ToolOutcome(result, outcome.rebuild_reason)

    async def _run(self, call: ToolCall, partition: int) -> ToolOutcome:
        if call.end_session:
            self.table.forget(call.session_id)
            return ToolOutcome(_result(call, "ok"))
        if call.stateless or call.language != "python":
            return ToolOutcome(await self._stateless(call))
        return await self._stateful(call, partition)

    async def _stateful(self, call: ToolCall, partition: int) -> ToolOutcome:
        held = self.table.get(call.session_id)
        decision = decide(call, held.seq if held is not None else None)
        match decision.action:
            case "run" if held is not None:
                result = await self._cell(call, held)
            case "resend" if held is not None and held.last is not None:
                result = held.last
            case "start":
                result = await self._started(call, partition)
            case "rebuild":
                return await self._rebuilt(call, partition)
            case "rejected":
                result = _result(call, "rejected", message=decision.message)
            case _:
                reason = "not_held" if held is not None else self.table.gone_reason(call.session_id)
                result = _result(call, "replay_needed", rebuild_reason=reason)
        return ToolOutcome(result)

    # -- stateful --------------------------------------------------------------

    async def _started(self, call: ToolCall, partition: int) -> ToolResult:
        held = await self._start(call, partition)
        if isinstance(held, ToolResult):
            return held
        return await self._cell(call, held)

    async def _start(self, call: ToolCall, partition: int) -> Held | ToolResult:
        try:
            async with self._slots:
                session = await self._factory.start_session(session_limits(call.limits))
        except SandboxFault as exc:
            log.warning("starting tool session %s failed: %s", call.session_id, exc)
            return _result(call, "sandbox_error", message=f"session could not start: {exc}")
        held = Held(call.session_id, session, call.limits, partition)
        self.table.add(held)
        return held

    async def _rebuilt(self, call: ToolCall, partition: int) -> ToolOutcome:
        reason: RebuildReason = (
            "not_held" if call.session_id in self.table else self.table.gone_reason(call.session_id)
        )
        started = time.monotonic()
        history = call.history or []
        attributes: dict[str, str | int] = {
            "rewardbus.session_id": call.session_id,
            "rewardbus.replayed": len(history),
        }
        with tracer.start_as_current_span("replay tool session", attributes=attributes) as span:
            held = await self._start(call, partition)
            replayed = held if isinstance(held, ToolResult) else await self._replay(call, held)
            if isinstance(replayed, ToolResult):
                span.set_status(trace.Status(trace.StatusCode.ERROR, replayed.message[:200]))
        replay_ms = round((time.monotonic() - started) * 1000, 3)
        if isinstance(replayed, Held):
            result = msgspec.structs.replace(
                await self._cell(call, replayed), replayed=len(history)
            )
        else:
            result = replayed  # the session could not be rebuilt
        result = msgspec.structs.replace(
            result, rebuilt=True, rebuild_reason=reason, replay_ms=replay_ms
        )
        return ToolOutcome(result, reason)

    async def _replay(self, call: ToolCall, held: Held) -> Held | ToolResult:
        """Run the history's cells, outputs discarded: the session rebuilt, or the result
        to reply when one of them fails."""
        for cell in call.history or []:
            try:
                ran = await self._exec(held, cell.code, call.limits)
            except SandboxFault as exc:
                self.table.remove(call.session_id, "ended")
                return _result(call, "sandbox_error", message=f"replaying seq {cell.seq}: {exc}")
            if not ran.alive:
                self.table.remove(call.session_id, "ended")
                return _result(
                    call,
                    "session_lost",
                    message=f"the session did not survive replaying seq {cell.seq} ({ran.status})",
                )
        held.seq = call.seq - 1
        return held

    async def _cell(self, call: ToolCall, held: Held) -> ToolResult:
        try:
            with tracer.start_as_current_span("run cell") as span:
                ran = await self._exec(held, call.code, call.limits)
                span.set_attribute("rewardbus.tool.cell_status", ran.status)
        except SandboxFault as exc:
            log.warning("tool session %s failed: %s", call.session_id, exc)
            self.table.remove(call.session_id, "ended")
            return _result(call, "sandbox_error", message=str(exc))
        result = _cell_result(call, ran)
        if ran.alive:
            held.seq, held.last = call.seq, result
        else:
            self.table.remove(call.session_id, "ended")
        return result

    async def _exec(self, held: Held, code: str, limits: ToolLimits) -> CellResult:
        async with self._slots:
            with self.table.using(held):
                return await held.session.run_cell(
                    code, time_s=limits.time_s, output_bytes=limits.output_kb * 1024
                )

    # -- stateless -------------------------------------------------------------

    async def _stateless(self, call: ToolCall) -> ToolResult:
        language = lookup(call.language)
        if language is None or language.name not in self._runner.languages:
            return _result(call, "rejected", message=f"unsupported language {call.language!r}")
        completion = Completion(
            sample_id=call.call_id,
            language=language.name,
            code=call.code,
            # One run with empty stdin; what it printed is the answer, not a comparison.
            tests=IoSuite(inputs=[""], outputs=[""], compare="exact"),
            limits=Limits(
                time_s=call.limits.time_s,
                memory_mb=call.limits.memory_mb,
                output_kb=call.limits.output_kb,
            ),
        )
        try:
            async with self._slots:
                # The whole output the call may have (its cap, and one byte to see a cut).
                event = await self._runner.run(
                    completion, output_tail_bytes=call.limits.output_kb * 1024 + 1
                )
        except SandboxWorkerError as exc:  # the program cannot be run here at all
            status: ToolStatus = "sandbox_error" if exc.retriable else "rejected"
            return _result(call, status, message=exc.reason)
        return _program_result(call, event)


_VERDICT_STATUS: dict[Verdict, ToolStatus] = {
    Verdict.ACCEPTED: "ok",
    Verdict.WRONG_ANSWER: "ok",  # the empty expected output: any output is a wrong answer
    Verdict.RUNTIME_ERROR: "error",
    Verdict.COMPILE_ERROR: "error",
    Verdict.NO_CODE: "error",
    Verdict.TIME_LIMIT: "time_limit",
    Verdict.MEMORY_LIMIT: "memory_limit",
    Verdict.OUTPUT_LIMIT: "output_limit",
    Verdict.SANDBOX_ERROR: "sandbox_error",
}


def _program_result(call: ToolCall, event: RewardEvent) -> ToolResult:
    status = _VERDICT_STATUS.get(event.verdict, "error")
    cap = call.limits.output_kb * 1024
    stdout, cut_out = _capped(event.stdout_tail.encode(), cap)
    stderr_text = event.stderr_tail
    if status == "error" and event.message and event.message not in stderr_text:
        stderr_text = f"{stderr_text}{event.message}"  # a compiler's complaint, for one
    stderr, cut_err = _capped(stderr_text.encode(), cap)
    cpu_ms = sum(test.cpu_ms for test in event.tests)
    return _result(
        call,
        status,
        stdout=stdout,
        stderr=stderr,
        truncated=cut_out or cut_err,
        message=event.message if status == "sandbox_error" else "",
        exec_ms=event.exec_ms,
        cpu_ms=cpu_ms,
    )


def _cell_result(call: ToolCall, ran: CellResult) -> ToolResult:
    cap = call.limits.output_kb * 1024
    stdout, cut_out = _capped(ran.stdout, cap)
    stderr, cut_err = _capped(ran.stderr, cap)
    return _result(
        call,
        ran.status,
        stdout=stdout,
        stderr=stderr,
        truncated=ran.truncated or cut_out or cut_err,
        exec_ms=round(ran.wall_ms, 3),
        cpu_ms=round(ran.cpu_ms, 3),
    )


def _capped(data: bytes, cap: int) -> tuple[str, bool]:
    return data[:cap].decode("utf-8", errors="replace"), len(data) > cap


def _result(
    call: ToolCall,
    status: ToolStatus,
    *,
    stdout: str = "",
    stderr: str = "",
    truncated: bool = False,
    message: str = "",
    exec_ms: float = 0.0,
    cpu_ms: float = 0.0,
    rebuild_reason: RebuildReason = "",
) -> ToolResult:
    return ToolResult(
        call_id=call.call_id,
        session_id=call.session_id,
        seq=call.seq,
        status=status,
        stdout=stdout,
        stderr=stderr,
        truncated=truncated,
        message=message,
        exec_ms=exec_ms,
        cpu_ms=cpu_ms,
        rebuild_reason=rebuild_reason,
    )
