"""How often a completion record has been started: the quarantine ledger's entries.

A worker writes an :class:`Attempt` to the compacted attempts topic (key: the
record's ``topic:partition:offset``, see :func:`attempt_key`) and waits for the
ack *before* it judges the record, and a tombstone once the record is done. An
entry that outlives its worker therefore counts a start that never finished:
the worker crashed, wedged or was killed while the record was in flight. After
enough of those the record is quarantined (dead-lettered unjudged) instead of
being handed to the next worker to die on.
"""

from __future__ import annotations

import msgspec

from schemas.messages import SCHEMA_VERSION, _now

__all__ = ["Attempt", "attempt_key"]


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """The ``count``-th start of one completion record, by ``worker_id``."""

    count: int
    worker_id: str = ""
    started_at: float = msgspec.field(default_factory=_now)
    schema_version: int = SCHEMA_VERSION


def attempt_key(topic: str, partition: int, offset: int) -> bytes:
    """The ledger key of the record at ``offset`` of ``topic``'s ``partition``."""
    return f"{topic}:{partition}:{offset}".encode()
