"""The root of every trainer-side error: ``reason`` says why, ``retriable`` whether trying
again can help. The whole tree::

    ProducerError
    └── PublishError   the broker did not take a record (retriable as the broker says:
                       a leader election is, a record larger than the topic allows is not)

Misuse (publishing before ``start``, a batch opened twice in a ``BatchWindow``) is
``RuntimeError``/``ValueError``, not part of the tree: a bug to fix, not a fault to handle.
"""

from __future__ import annotations

__all__ = ["ProducerError", "PublishError"]


class ProducerError(Exception):
    """Root of the producers package's errors; ``retriable`` defaults to the class's own."""

    retriable: bool = False

    def __init__(self, reason: str, *, retriable: bool | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        if retriable is not None:
            self.retriable = retriable


class PublishError(ProducerError):
    """A completion, manifest or problem was not acknowledged by the broker."""
