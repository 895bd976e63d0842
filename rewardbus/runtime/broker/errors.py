"""The embedded broker's errors: `BrokerError`, whose message says what to do.

Every failure is a `BrokerError` (a shell `Unavailable`): java missing, jars missing, the broker
died during start-up (with the tail of its log), or it did not become ready in time. None
of them is worth retrying as is; `PortTaken` is the one start() retries itself.
"""

from __future__ import annotations

from rewardbus.errors import Unavailable

__all__ = ["BrokerError", "PortTaken"]


class BrokerError(Unavailable):
    """The embedded broker could not be started or died; the message says why and what to do."""


class PortTaken(BrokerError):
    """A port picked at start was bound by someone else first; start() retries."""
