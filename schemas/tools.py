"""The tool-call contract: code a model runs during a multi-turn rollout, and what it got back.

A trajectory's calls share a *session* (``session_id``): a live interpreter on the
worker that owns the session's partition of ``rollouts.tool_calls`` (keyed by
session id), whose state (variables, imports, files) lasts from one call to the
next. Each call of a session has the next sequence number (``seq``, from 1).

The caller keeps the session's *accepted* cells: those its session survived
(:data:`ACCEPTED`). A worker that does not hold the session at ``seq - 1`` (its
partition moved, the worker restarted, the session was evicted, expired, or a cell
ended it) answers ``replay_needed``; the caller sends the call again with
``history`` (the accepted cells before it), and the worker rebuilds the session by
running them, outputs discarded, before the call's own cell. The result says so
(``rebuilt``, ``rebuild_reason``, ``replayed``). ``replay_needed`` is between the
client and the worker: a model never sees it.

Results go to the caller's reply topic (``Topics.reply_topic``), as rewards for a
waiting verl reward loop do. Everything here is plain msgpack (docs/messages.md).
"""

from __future__ import annotations

import time
from typing import Annotated, Literal, get_args

import msgspec

from schemas.messages import SCHEMA_VERSION

__all__ = [
    "ACCEPTED",
    "REBUILD_REASONS",
    "TOOL_STATUSES",
    "RebuildReason",
    "ToolCall",
    "ToolCell",
    "ToolLimits",
    "ToolResult",
    "ToolStatus",
]

Positive = Annotated[float, msgspec.Meta(gt=0)]
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
Seq = Annotated[int, msgspec.Meta(ge=1)]

# ok: the cell ran to its end. error: it raised (the traceback, as the model would see
# it, is in stderr). time_limit / memory_limit / output_limit: it hit the cell's CPU
# time, the session's memory or the cell's output cap. session_lost: the interpreter
# died (the cell exited it, crashed it, or its session could not be rebuilt).
# sandbox_error: the infrastructure failed, not the code. rejected: the call itself is
# invalid (unknown language, stale sequence number); replay_needed: see the module doc.
ToolStatus = Literal[
    "ok",
    "error",
    "time_limit",
    "memory_limit",
    "output_limit",
    "session_lost",
    "sandbox_error",
    "rejected",
    "replay_needed",
]
TOOL_STATUSES: tuple[ToolStatus, ...] = get_args(ToolStatus)

ACCEPTED: frozenset[ToolStatus] = frozenset({"ok", "error", "output_limit"})
"""Statuses of cells whose session survived them: the cells a rebuild replays."""

# Why a session was rebuilt: the worker never held it (a new owner after a rebalance,
# a restart or a scale-out), it evicted it to make room, its idle TTL or lifetime
# ran out, or a cell ended it (time or memory limit, the interpreter died).
RebuildReason = Literal["", "not_held", "evicted", "expired", "ended"]
REBUILD_REASONS: tuple[RebuildReason, ...] = get_args(RebuildReason)


def _now() -> float:
    return time.time()


class ToolLimits(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Limits of one call (``time_s``, ``output_kb``) and of its session (the rest)."""

    time_s: Positive = 5.0
    """CPU time of this call's cell."""
    output_kb: PositiveInt = 64
    """stdout and stderr, each, beyond which the cell's output is cut (status output_limit)."""
    memory_mb: PositiveInt = 512
    """The whole session (interpreter, its children, its tmpfs files)."""
    idle_ttl_s: Positive = 600.0
    """A session with no call for this long is ended."""
    lifetime_s: Positive = 3600.0
    """A session older than this is ended (its next call rebuilds it)."""


class ToolCell(msgspec.Struct, frozen=True, kw_only=True):
    """An accepted cell of a session, as the caller kept it for a replay."""

    seq: Seq
    code: str


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One cell to run; key on the wire is ``session_id``.

    ``stateless`` calls (every language but python is stateless) run as a fresh
    program through the executor, as a completion's code does; ``end_session`` asks
    the worker to end the session (``code`` is ignored; the result is ``ok``).
    """

    call_id: str
    session_id: str
    seq: Seq
    reply_topic: str
    language: str = "python"
    code: str = ""
    stateless: bool = False
    end_session: bool = False
    limits: ToolLimits = ToolLimits()
    history: list[ToolCell] | None = None
    created_at: float = msgspec.field(default_factory=_now)
    policy_version: int = 0
    attributes: dict[str, str] = {}
    schema_version: int = SCHEMA_VERSION


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one call got; sent to the call's reply topic, key ``session_id``.

    ``stdout``/``stderr`` are cut at the call's ``output_kb`` (``truncated``).
    ``queue_ms`` is from the call's ``created_at`` to the worker starting it;
    ``exec_ms`` the cell's own run, ``replay_ms`` the rebuild before it.
    """

    call_id: str
    session_id: str
    seq: int
    status: ToolStatus
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    message: str = ""
    exec_ms: float = 0.0
    cpu_ms: float = 0.0
    queue_ms: float = 0.0
    replay_ms: float = 0.0
    replayed: int = 0
    rebuilt: bool = False
    rebuild_reason: RebuildReason = ""
    worker_id: str = ""
    created_at: float = msgspec.field(default_factory=_now)
    schema_version: int = SCHEMA_VERSION
