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

from schemas import RewardbusError

__all__ = ["CommitFailed", "KafkaIOError", "ProduceError", "TopicNotFound"]


class KafkaIOError(RewardbusError):
    """Root of the seam's errors: a :class:`~schemas.RewardbusError`."""


class ProduceError(KafkaIOError):
    """The broker did not acknowledge a record (refused it, or could not be reached)."""


class CommitFailed(KafkaIOError):
    """An offset commit did not happen: the partitions were reassigned meanwhile, or no
    coordinator answered in time. The offsets stay where they were; the next commit, or
    the next owner's redelivery, covers them."""


class TopicNotFound(KafkaIOError):
    """Topics that were waited for did not appear in the cluster metadata in time."""
