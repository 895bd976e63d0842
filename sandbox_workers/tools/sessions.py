"""The live sessions one worker holds: a bounded table, least recently used evicted first.

Each entry is a :class:`Held` session: its :class:`~sandbox_workers.tools.session.LiveSession`,
the last sequence number applied to it and that call's result (a redelivered call is
answered with it), when it started and was last used, and the partition its calls come
from. A session that goes (evicted, expired, ended by a cell) leaves a tombstone saying
why, in a small bounded map, so the next call's ``rebuild_reason`` can tell the caller.

Idle TTL and lifetime are enforced by the event loop: one timer, set for the earliest
deadline (``loop.call_at``), never a polling loop. A session running a cell is neither
evicted nor expired under it; it is reconsidered once the cell is done.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sandbox_workers.tools.session import LiveSession
from schemas import RebuildReason, ToolLimits, ToolResult

__all__ = ["Held", "SessionTable"]

log = logging.getLogger(__name__)

# Why a session left the table; "" for a deliberate end (end_session, a revoked partition).
GoneReason = RebuildReason


@dataclass(eq=False)
class Held:
    """One live session and where its calls have got to."""

    session_id: str
    session: LiveSession
    limits: ToolLimits
    partition: int
    seq: int = 0
    last: ToolResult | None = None
    created_at: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0

    def deadline(self) -> float:
        """When it expires (monotonic): idle TTL after its last use, or its lifetime."""
        return min(
            self.last_used + self.limits.idle_ttl_s, self.created_at + self.limits.lifetime_s
        )


class SessionTable:
    """At most ``max_sessions`` live sessions by id; ``on_gone(reason)`` counts each removal.

    Sessions removed here are closed in the background (:meth:`aclose` waits for them).
    """

    def __init__(
        self,
        max_sessions: int,
        *,
        max_tombstones: int | None = None,
        on_gone: Callable[[GoneReason], None] = lambda _reason: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.max_sessions = max_sessions
        self._max_tombstones = max_tombstones or max(1024, 4 * max_sessions)
        self._held: OrderedDict[str, Held] = OrderedDict()  # least recently used first
        # What sessions() returns: replaced whole on each change, so a metrics scrape in
        # another thread never iterates the table while the loop changes it.
        self._snapshot: tuple[Held, ...] = ()
        self._tombstones: OrderedDict[str, RebuildReason] = OrderedDict()
        self._deadlines: list[tuple[float, int, str]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._on_gone = on_gone
        self._clock = clock
        self._pushes = 0

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._held

    def sessions(self) -> tuple[Held, ...]:
        """The held sessions (safe to read from a metrics thread)."""
        return self._snapshot

    def get(self, session_id: str) -> Held | None:
        """The held session, or None."""
        return self._held.get(session_id)

    def gone_reason(self, session_id: str) -> RebuildReason:
        """Why ``session_id`` is not held: evicted, expired, ended, or (unknown) not_held."""
        return self._tombstones.get(session_id) or "not_held"

    def add(self, held: Held) -> None:
        """Hold ``held`` (replacing a session of the same id), evicting the least recently
        used idle sessions beyond the bound."""
        self.remove(held.session_id, "")
        self._tombstones.pop(held.session_id, None)
        self._held[held.session_id] = held
        self._snapshot = tuple(self._held.values())
        self._evict_beyond_bound(keep=held)
        self._push_deadline(held)

    @contextmanager
    def using(self, held: Held) -> Iterator[Held]:
        """Mark ``held`` in use for a cell: it is neither evicted nor expired meanwhile."""
        held.busy += 1
        self._touch(held)
        try:
            yield held
        finally:
            held.busy -= 1
            self._touch(held)
            self._evict_beyond_bound(keep=held)  # were all busy when the last was added

    def remove(self, session_id: str, reason: GoneReason) -> None:
        """Close the session (in the background) and remember ``reason`` (when given)."""
        held = self._held.pop(session_id, None)
        if held is None:
            return
        self._snapshot = tuple(self._held.values())
        if reason:
            self._tombstones[session_id] = reason
            self._tombstones.move_to_end(session_id)
            while len(self._tombstones) > self._max_tombstones:
                self._tombstones.popitem(last=False)
        self._on_gone(reason)
        self._close_later(held)

    def forget(self, session_id: str) -> None:
        """Drop the session and any tombstone of it (the caller ended it)."""
        self.remove(session_id, "")
        self._tombstones.pop(session_id, None)

    def keep_partitions(self, partitions: Iterable[int]) -> int:
        """Close the sessions whose partition is not in ``partitions`` (they moved away:
        their next owner rebuilds them). Returns how many were closed."""
        keep = set(partitions)
        moved = [h.session_id for h in self._held.values() if h.partition not in keep]
        for session_id in moved:
            self.remove(session_id, "")
        return len(moved)

    async def aclose(self) -> None:
        """Close every session and wait for every close."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for session_id in list(self._held):
            self.remove(session_id, "")
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)

    # -- bounds and deadlines --------------------------------------------------

    def _touch(self, held: Held) -> None:
        held.last_used = self._clock()
        if self._held.get(held.session_id) is held:
            self._held.move_to_end(held.session_id)
            self._push_deadline(held)

    def _evict_beyond_bound(self, keep: Held) -> None:
        while len(self._held) > self.max_sessions:
            idle = next((h for h in self._held.values() if not h.busy and h is not keep), None)
            if idle is None:  # every one is running a cell: over the bound until one ends
                return
            log.info("evicting tool session %s (%d held)", idle.session_id, len(self._held))
            self.remove(idle.session_id, "evicted")

    def _push_deadline(self, held: Held) -> None:
        self._pushes += 1
        heapq.heappush(self._deadlines, (held.deadline(), self._pushes, held.session_id))
        if len(self._deadlines) > 4 * max(len(self._held), 64):  # stale entries piled up
            self._deadlines = [(h.deadline(), 0, h.session_id) for h in self._held.values()]
            heapq.heapify(self._deadlines)
        self._arm()

    def _arm(self) -> None:
        """Set the one timer for the earliest deadline."""
        if not self._deadlines:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a unit test of the pure parts): expire() by hand
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, self._deadlines[0][0] - self._clock())
        self._timer = loop.call_later(delay, self.expire)

    def expire(self) -> int:
        """End the sessions past their idle TTL or lifetime; returns how many."""
        self._timer = None
        now = self._clock()
        expired = 0
        while self._deadlines and self._deadlines[0][0] <= now:
            _deadline, _n, session_id = heapq.heappop(self._deadlines)
            held = self._held.get(session_id)
            if held is None or held.busy or held.deadline() > now:
                continue  # gone, running a cell (re-pushed when done), or used since
            log.info("tool session %s expired", session_id)
            self.remove(session_id, "expired")
            expired += 1
        self._arm()
        return expired

    def _close_later(self, held: Held) -> None:
        try:
            task = asyncio.get_running_loop().create_task(_close(held))
        except RuntimeError:
            return  # no loop: nothing could have been started
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


async def _close(held: Held) -> None:
    try:
        await held.session.aclose()
    except Exception:  # a session that fails to close must not stop the worker
        log.exception("closing tool session %s failed", held.session_id)
