"""Where a learner is in the scored-batch stream, as a value a checkpoint can hold.

A trainer that checkpoints saves :meth:`ScoredBatches.position` (or
:meth:`LearnerSource.position`) in the same atomic write as its weights and
starts its reader again with ``ScoredBatches(kafka, start_at=position)``: the
batches it had taken are not taken again, and none that came after is missed.

Offsets alone would not be exact: batches are handed out in arrival order (or by
id, with ``get``), so a batch at a higher offset can be taken while an older one
still waits in the buffer. The position is therefore, per partition, the offset of
the oldest record not yet taken, plus the ids of the batches taken at or beyond
it, which the restarted reader treats as taken. The most recently taken ids are
kept too, so that a copy an aggregator re-emits after its own restart (emission is
at-least-once) is not taken twice either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["StreamPosition"]


@dataclass(frozen=True)
class StreamPosition:
    """``offsets``: partition -> the next offset to read; ``taken``: batch ids not to hand out."""

    topic: str
    offsets: Mapping[int, int]
    taken: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON, msgpack, ``torch.save``); partitions as strings, as JSON keys are."""
        return {
            "topic": self.topic,
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
            "taken": list(self.taken),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamPosition:
        """The inverse of :meth:`to_dict`; ``ValueError`` on anything else."""
        try:
            topic = data["topic"]
            offsets = {int(p): int(o) for p, o in dict(data["offsets"]).items()}
            taken = tuple(str(batch_id) for batch_id in data.get("taken", ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a scored-batch stream position: {exc!r}") from None
        if not isinstance(topic, str) or not topic:
            raise ValueError("a stream position names its topic")
        if any(p < 0 or o < 0 for p, o in offsets.items()):
            raise ValueError(f"negative partition or offset in {offsets}")
        return cls(topic=topic, offsets=offsets, taken=taken)
