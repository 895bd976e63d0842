"""Which input offsets are safe to commit while records finish out of order."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["OffsetTracker"]

P = TypeVar("P", bound=Hashable)


@dataclass
class _PartitionState:
    in_flight: set[int] = field(default_factory=set)
    next_offset: int | None = None
    committed: int | None = None


class OffsetTracker(Generic[P]):
    """Tracks in-flight records per partition.

    An offset is committable only when every record before it is done, so a
    crash never skips a record whose reward was not yet acknowledged.
    """

    def __init__(self) -> None:
        self._partitions: dict[P, _PartitionState] = {}

    def started(self, partition: P, offset: int) -> None:
        state = self._partitions.setdefault(partition, _PartitionState())
        state.in_flight.add(offset)

    def done(self, partition: P, offset: int) -> None:
        state = self._partitions.get(partition)
        if state is None or offset not in state.in_flight:
            return  # the partition was revoked and forgotten meanwhile
        state.in_flight.discard(offset)
        if state.next_offset is None or offset + 1 > state.next_offset:
            state.next_offset = offset + 1

    def in_flight(self, partition: P | None = None) -> int:
        """Records started and not done, for one partition or all."""
        if partition is not None:
            state = self._partitions.get(partition)
            return len(state.in_flight) if state else 0
        return sum(len(s.in_flight) for s in self._partitions.values())

    def committable(self) -> dict[P, int]:
        """The next offset to commit per partition, where it moved since the last commit."""
        out: dict[P, int] = {}
        for partition, state in self._partitions.items():
            safe = min(state.in_flight) if state.in_flight else state.next_offset
            if safe is not None and safe != state.committed:
                out[partition] = safe
        return out

    def mark_committed(self, offsets: dict[P, int]) -> None:
        for partition, offset in offsets.items():
            if partition in self._partitions:
                self._partitions[partition].committed = offset

    def forget(self, partitions: Iterable[P]) -> None:
        """Drop partitions that were revoked."""
        for partition in partitions:
            self._partitions.pop(partition, None)
