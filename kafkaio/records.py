"""What flows through the seam: records, their partitions, the broker's acknowledgements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

__all__ = ["Delivery", "Record", "TopicPartition"]

if TYPE_CHECKING:

    class TopicPartition(NamedTuple):
        """A topic and one of its partitions."""

        topic: str
        partition: int

else:
    # aiokafka checks isinstance() on the partitions it is given: its own class, typed
    # above, is passed through both ways without a conversion per call.
    from aiokafka.structs import TopicPartition


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed record: where it is, its bytes, its headers, its timestamp."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]] = ()
    timestamp_ms: int = 0


class Delivery(Protocol):
    """Where the broker put an acknowledged record."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...
