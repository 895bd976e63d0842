"""The root of every trainer-side error: ``reason`` says why, ``retriable`` whether trying
again can help. The whole tree::

    ProducerError
    └── PublishError   the broker did not take a record (retriable as the broker says:
                       a leader election is, a record larger than the topic allows is not)

Misuse (publishing before ``start``, a batch opened twice in a ``BatchWindow``) is
``RuntimeError``/``ValueError``, not part of the tree: a bug to fix, not a fault to handle.
"""

from __future__ import annotations

from schemas import RewardbusError

__all__ = ["ProducerError", "PublishError"]


class ProducerError(RewardbusError):
    """Root of the producers package's errors: a :class:`~schemas.RewardbusError`."""


class PublishError(ProducerError):
    """A completion, manifest or problem was not acknowledged by the broker."""
