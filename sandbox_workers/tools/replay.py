"""What a worker does with a session's call, given the sequence number it holds the session at.

The replay protocol of :mod:`schemas.tools`, as one pure function
(:func:`decide`): no I/O, so every case is a unit test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from schemas import ToolCall

__all__ = ["Action", "Decision", "decide"]

# run: the next cell of the held session. resend: the call was applied already (a
# redelivery, a client retry): its kept result again. start: a new session (seq 1).
# replay_needed: ask the caller for the history. rebuild: a fresh session, the
# history replayed, then the cell. rejected: a stale sequence number.
Action = Literal["run", "resend", "start", "replay_needed", "rebuild", "rejected"]


@dataclass(frozen=True)
class Decision:
    """An :data:`Action`, and for a rejection why."""

    action: Action
    message: str = ""


def decide(call: ToolCall, held_seq: int | None) -> Decision:
    """What to do with stateful ``call``, its session held at ``held_seq`` (None: not held)."""
    if held_seq is not None:
        if call.seq == held_seq + 1:
            return Decision("run")
        if call.seq == held_seq:
            return Decision("resend")
        if call.seq < held_seq:
            return Decision(
                "rejected",
                f"seq {call.seq} is stale: session {call.session_id} is at seq {held_seq}",
            )
    # Not held, or held with a gap before this call: only its history can rebuild it.
    if call.history is not None and (call.history or call.seq > 1):
        return Decision("rebuild")
    if call.seq == 1 and held_seq is None:
        return Decision("start")
    return Decision("replay_needed")
