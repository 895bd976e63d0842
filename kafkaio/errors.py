"""The seam's errors: ``reason`` says what failed, ``retriable`` whether trying again can help.

::

    KafkaIOError          the broker or the client failed (retriable as the broker says)
    ├── ProduceError      a record was not acknowledged
    ├── CommitFailed      an offset commit lost a race with a rebalance (the partitions are
    │                     someone else's now: not retriable, the new owner redoes the rest)
    └── TopicNotFound     topics did not appear within the wait (create them first)

aiokafka's own exceptions never cross the seam: the implementations translate them.
"""

from __future__ import annotations

__all__ = ["CommitFailed", "KafkaIOError", "ProduceError", "TopicNotFound"]


class KafkaIOError(Exception):
    """Root of the seam's errors; ``retriable`` defaults to the class's own."""

    retriable: bool = False

    def __init__(self, reason: str, *, retriable: bool | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        if retriable is not None:
            self.retriable = retriable


class ProduceError(KafkaIOError):
    """The broker did not acknowledge a record (refused it, or could not be reached)."""


class CommitFailed(KafkaIOError):
    """An offset commit failed because the partitions were reassigned meanwhile."""


class TopicNotFound(KafkaIOError):
    """Topics that were waited for did not appear in the cluster metadata in time."""
