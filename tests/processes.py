"""Helpers for tests that watch processes they did not spawn themselves."""

from __future__ import annotations

import os
import select

__all__ = ["exited_within"]


def exited_within(pid: int, timeout_s: float) -> bool:
    """Wait on the process itself (a pidfd), not a timer; True once it has exited."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], timeout_s)
        return bool(readable)
    finally:
        os.close(pidfd)
