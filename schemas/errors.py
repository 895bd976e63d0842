"""The shape every rewardbus error has: a ``reason``, and whether trying again can help.

Each package has one root of its own, all subclasses of :class:`RewardbusError`
(so one ``except`` catches every fault of ours and nothing else)::

    RewardbusError
    ├── SchemaError          schemas: bytes that are not a valid message (never retriable)
    ├── KafkaIOError         kafkaio: the broker or the client failed
    ├── ProducerError        producers
    ├── SandboxWorkerError   sandbox_workers
    └── ConsumerError        consumers

Each package draws its own branch in its module docstring.
"""

from __future__ import annotations

__all__ = ["RewardbusError"]


class RewardbusError(Exception):
    """``reason`` says what failed; ``retriable`` (default: the class's own) whether to retry."""

    retriable: bool = False

    def __init__(self, reason: str, *, retriable: bool | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        if retriable is not None:
            self.retriable = retriable
