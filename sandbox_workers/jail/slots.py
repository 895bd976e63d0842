"""Cgroup slots: where executions run, one at a time, each slot reused while it stays clean.

A :class:`Slot` is a long-lived ``rbjail --spawner`` inside its own cgroups (if
any); :class:`SlotPool` hands them out with an execution's limits set, takes
them back, and kills and removes any that something was left in.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sandbox_workers.jail.cgroups import CgroupLimits, CgroupSlot, CgroupTree
from sandbox_workers.jail.process import Spawner
from sandbox_workers.sandbox import SandboxFault

__all__ = ["Slot", "SlotPool"]

_log = logging.getLogger(__name__)


@dataclass(eq=False)  # identity: slots are kept in sets
class Slot:
    """Where one execution at a time runs: a spawner, inside its cgroups if any."""

    spawner: Spawner
    cgroup: CgroupSlot | None


class SlotPool:
    """Slots for concurrent executions; a slot whose jail ended cleanly is reused."""

    def __init__(
        self, launcher: str, tree: CgroupTree | None, max_idle: int, *, share_net: bool
    ) -> None:
        self._launcher = launcher
        self._share_net = share_net
        self._tree = tree
        self._max_idle = max_idle
        self._free: list[Slot] = []
        self._dirty: list[CgroupSlot] = []

    def _new(self) -> Slot:
        cgroup = self._tree.new_slot() if self._tree is not None else None
        try:
            procs = cgroup.procs_files if cgroup else ()
            return Slot(Spawner(self._launcher, procs, share_net=self._share_net), cgroup)
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            raise

    def acquire(self, limits: CgroupLimits) -> Slot:
        """A slot with ``limits`` set (an idle one, else a new one); SandboxFault if not."""
        self._retry_dirty()
        slot = None
        while self._free and slot is None:
            slot = self._free.pop()
            if not slot.spawner.alive:
                self.discard(slot)
                slot = None
        slot = slot or self._new()
        if slot.cgroup is not None:
            try:
                slot.cgroup.prepare(limits)
            except OSError as exc:
                self.discard(slot)
                raise SandboxFault(f"cannot prepare cgroup: {exc}") from exc
        return slot

    def release(self, slot: Slot, *, finished: bool) -> None:
        """Return a slot; ``finished``: its jail ended by itself (not cancelled or failed)."""
        leftover = slot.cgroup is not None and not slot.cgroup.is_empty(
            frozenset({slot.spawner.pid})
        )
        if leftover and finished:
            # The jail's pid namespace is gone, so nothing can be left; if
            # something is, the slot is killed and never reused.
            _log.warning("processes left in a cgroup slot after the jail ended: killing")
        reusable = slot.cgroup is None or slot.cgroup.reusable
        idle_full = len(self._free) >= self._max_idle
        if leftover or not slot.spawner.alive or idle_full or not reusable:
            self.discard(slot)
        else:
            self._free.append(slot)

    def discard(self, slot: Slot) -> None:
        """Stop a slot's spawner (and all it started) and remove its cgroups."""
        slot.spawner.close()
        if slot.cgroup is not None:
            slot.cgroup.kill()
            if not slot.cgroup.remove():
                self._dirty.append(slot.cgroup)

    def _retry_dirty(self) -> None:
        if self._dirty:
            self._dirty = [c for c in self._dirty if not (c.kill() or c.remove())]

    def close(self) -> None:
        """Stop the idle slots and remove the cgroup tree (slots held elsewhere: discard first)."""
        for slot in self._free:
            self.discard(slot)
        self._free.clear()
        self._retry_dirty()
        if self._tree is not None:
            self._tree.close()
