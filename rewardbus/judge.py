"""``rewardbus judge``: completions from JSON lines, judged locally without Kafka."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TextIO

from sandbox_workers import Executor, InvalidCompletion
from schemas import Completion, SchemaError, decode_json, encode_json

__all__ = ["judge_lines"]


async def judge_lines(lines: Iterable[str], executor: Executor, *, out: TextIO) -> int:
    """Judge each JSON line; print one JSON result per line. Returns the exit status.

    A line that is not a valid completion prints an ``error`` object for that line
    and the rest are still judged (status 1 at the end).
    """
    status = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            completion = decode_json(line, Completion)
        except SchemaError as exc:
            out.write(encode_json({"line": number, "error": exc.reason}).decode() + "\n")
            status = 1
            continue
        try:
            event = await executor.run(completion)
        except InvalidCompletion as exc:
            out.write(
                encode_json(
                    {"line": number, "sample_id": completion.sample_id, "error": exc.reason}
                ).decode()
                + "\n"
            )
            status = 1
            continue
        out.write(encode_json(event).decode() + "\n")
        out.flush()
    return status
