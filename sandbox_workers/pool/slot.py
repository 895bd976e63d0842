"""What a zygote needs of the jail slot it lives in, as the pool sees it.

The jail provides both (a slot's ``Spawner`` and ``CgroupSlot``, see
:mod:`sandbox_workers.jail`). The pool names only these protocols: it never
imports the jail, which is what wires the pool in (one way, so no import cycle).
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Protocol

__all__ = ["JailSpawner", "SlotCgroup"]


class JailSpawner(Protocol):
    """A slot's ``rbjail --spawner``: forks a jail (its init, or a supervisor above it)."""

    async def spawn(self, options: Sequence[str], fds: Sequence[int]) -> int:
        """Fork a jail with ``options`` and stdio/status ``fds``; returns a pidfd of it."""
        ...


class SlotCgroup(Protocol):
    """A slot's cgroups, as far as a zygote checks that nothing but itself is left there."""

    @property
    def reusable(self) -> bool:
        """False once the slot cannot be reset for another execution."""
        ...

    def pids(self) -> Set[int]:
        """Processes in the slot."""
        ...

    def first_pids(self) -> frozenset[int]:
        """Processes in the slot, read from one hierarchy only (cheaper)."""
        ...
