"""Backpressure for the rollout side: at most N batches published and not yet learned from.

Without a bound, a fast rollout publishes batch after batch while rewards lag, and
every batch it runs ahead is one more policy version of staleness (and one more
rollout held in memory). A :class:`BatchWindow` makes the publisher wait instead:

    window = BatchWindow(max_in_flight=2)
    await window.acquire(batch_id)   # before publishing the batch; blocks while 2 are open
    ...                              # publish manifest and completions
    window.release(batch_id)         # when the learner has the batch's ScoredBatch

The learner side (``consumers.LearnerSource``) takes ``window.release`` as a
callback, so it works with any window (``producers`` never imports ``consumers``).
"""

from __future__ import annotations

import asyncio

__all__ = ["BatchWindow"]


class BatchWindow:
    """At most ``max_in_flight`` open batches; ``acquire`` waits for a free slot.

    Waiters are served in arrival order. ``release`` is idempotent (a batch
    released twice, or never acquired, frees nothing), so an at-least-once
    delivery of a scored batch cannot open the window wider than its bound.
    Holds only the ids of open batches: nothing grows without bound.
    """

    def __init__(self, max_in_flight: int) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, not {max_in_flight}")
        self.max_in_flight = max_in_flight
        self._slots = asyncio.Semaphore(max_in_flight)
        self._open: dict[str, None] = {}

    async def acquire(self, batch_id: str) -> None:
        """Open ``batch_id``, waiting while ``max_in_flight`` batches are open.

        Raises ``ValueError`` if ``batch_id`` is already open (a batch is published
        once). Cancelling a waiting ``acquire`` takes no slot.
        """
        if batch_id in self._open:
            raise ValueError(f"batch {batch_id} is already in flight")
        await self._slots.acquire()
        if batch_id in self._open:  # opened by a concurrent acquire while this one waited
            self._slots.release()
            raise ValueError(f"batch {batch_id} is already in flight")
        self._open[batch_id] = None

    def release(self, batch_id: str) -> bool:
        """Close ``batch_id``, freeing its slot; False (and nothing freed) if it was not open."""
        if batch_id not in self._open:
            return False
        del self._open[batch_id]
        self._slots.release()
        return True

    @property
    def in_flight(self) -> tuple[str, ...]:
        """The open batch ids, oldest first."""
        return tuple(self._open)

    def is_open(self, batch_id: str) -> bool:
        """Whether ``batch_id`` is acquired and not yet released."""
        return batch_id in self._open

    @property
    def full(self) -> bool:
        """Whether the next ``acquire`` would wait."""
        return len(self._open) >= self.max_in_flight
