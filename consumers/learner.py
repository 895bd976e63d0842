"""The learner's source of training batches: held rollouts joined with their scored batches.

A trainer that streams rewards publishes a batch's completions and keeps the
batch's rollout (for verl, a ``DataProto`` of prompts and responses) until the
aggregator's ``ScoredBatch`` for it arrives. :class:`LearnerSource` is that
holding area, bounded: it takes scored batches in arrival order (not publication
order: whichever batch finished first is trained on first), converts each with
its rollout, and tells the rollout side that the batch is done (``release``,
e.g. ``producers.BatchWindow.release``), which lets the publisher open the next
batch. The two sides meet only through that callback (DESIGN §3).

The conversion is injected, so that this module needs neither torch nor verl;
:meth:`LearnerSource.for_verl` plugs in :func:`consumers.verl_batch.scored_batch_to_dataproto`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from consumers.errors import ConsumerError
from consumers.learner_plan import LearnerCounters, StalenessPolicy
from consumers.position import StreamPosition
from schemas import ScoredBatch

__all__ = [
    "BatchConverter",
    "LearnerBatch",
    "LearnerSource",
    "LearnerSourceFullError",
    "PositionedSource",
    "ScoredBatchSource",
]

log = logging.getLogger(__name__)

RolloutT = TypeVar("RolloutT")
RolloutT_contra = TypeVar("RolloutT_contra", contravariant=True)
DataT = TypeVar("DataT")
DataT_co = TypeVar("DataT_co", covariant=True)


class ScoredBatchSource(Protocol):
    """Where scored batches come from: ``consumers.ScoredBatches``, or a fake in tests."""

    # Mirrors ScoredBatches.next, whose timeout is part of its public API.
    async def next(self, timeout: float | None = None) -> ScoredBatch:  # noqa: ASYNC109
        """The next batch in arrival order; ``TimeoutError`` after ``timeout`` seconds."""
        ...


@runtime_checkable
class PositionedSource(ScoredBatchSource, Protocol):
    """A source that can say where it is (``consumers.ScoredBatches`` can)."""

    def position(self) -> StreamPosition:
        """Where to start a reader that continues after what this one handed out."""
        ...


class BatchConverter(Protocol[RolloutT_contra, DataT_co]):
    """Turns a scored batch and its rollout into training data (and counts what it did)."""

    def __call__(
        self,
        scored: ScoredBatch,
        rollout: RolloutT_contra,
        /,
        *,
        learner_version: int | None,
        staleness: StalenessPolicy | None,
    ) -> tuple[DataT_co, LearnerCounters]:
        """Convert one batch."""
        ...


class LearnerSourceFullError(ConsumerError):
    """``hold`` was called with ``max_in_flight`` rollouts already held.

    Not retriable as is: the rollout side must wait for a release (a
    ``producers.BatchWindow`` of the same bound does) before publishing more.
    """


@dataclass(frozen=True)
class LearnerBatch(Generic[DataT]):
    """One batch ready to train on."""

    scored: ScoredBatch
    data: DataT
    counters: LearnerCounters

    @property
    def batch_id(self) -> str:
        """The batch's id."""
        return self.scored.batch_id


class LearnerSource(Generic[RolloutT, DataT]):
    """Holds at most ``max_in_flight`` rollouts; yields them scored, in arrival order.

    ``learner_version`` (the policy version being trained; update it after each
    step) and ``staleness`` are passed to the converter with every batch. A scored
    batch whose rollout is not held (another run's, or one already handed out) is
    skipped, logged and counted in :attr:`skipped`. ``counters`` adds up the
    converter's counters over every batch handed out; ``on_skip`` is called with
    each skipped batch (a trainer that resumed from a checkpoint sees there the
    batches of its previous incarnation, whose rollouts died with it).
    """

    def __init__(
        self,
        source: ScoredBatchSource,
        *,
        max_in_flight: int,
        convert: BatchConverter[RolloutT, DataT],
        release: Callable[[str], object] | None = None,
        staleness: StalenessPolicy | None = None,
        learner_version: int | None = None,
        on_skip: Callable[[ScoredBatch], object] | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, not {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.staleness = staleness
        self.learner_version = learner_version
        self.counters = LearnerCounters()
        self.skipped = 0
        self._source = source
        self._convert = convert
        self._release = release
        self._held: dict[str, RolloutT] = {}
        self._on_skip = on_skip

    @classmethod
    def for_verl(
        cls,
        source: ScoredBatchSource,
        *,
        max_in_flight: int,
        release: Callable[[str], object] | None = None,
        staleness: StalenessPolicy | None = None,
        learner_version: int | None = None,
        on_skip: Callable[[ScoredBatch], object] | None = None,
    ) -> LearnerSource[Any, Any]:
        """A source of verl ``DataProto``s (rollouts in, ``scored_batch_to_dataproto`` out).

        Needs the ``verl`` extra; imported here so that ``consumers`` does not need it.
        """
        from consumers.verl_batch import scored_batch_to_dataproto

        return LearnerSource(
            source,
            max_in_flight=max_in_flight,
            convert=scored_batch_to_dataproto,
            release=release,
            staleness=staleness,
            learner_version=learner_version,
            on_skip=on_skip,
        )

    def position(self) -> StreamPosition:
        """Where the learner is in the scored-batch stream, for a checkpoint.

        Save it in the same atomic write as the weights the batches handed out so far
        were applied to, and build the source again with
        ``ScoredBatches(kafka, start_at=position)`` on resume: no batch is applied twice
        and none is missed. Rollouts still held are not part of it: a checkpoint taken
        while some are held must save them too and ``hold`` them again after the
        resume, or their batches are skipped. ``TypeError`` when the source cannot
        say where it is.
        """
        if not isinstance(self._source, PositionedSource):
            raise TypeError(f"{type(self._source).__name__} has no position()")
        return self._source.position()

    def hold(self, batch_id: str, rollout: RolloutT) -> None:
        """Keep ``rollout`` until ``batch_id`` is scored; call it before publishing the batch.

        Raises :class:`LearnerSourceFullError` when ``max_in_flight`` rollouts are
        held, ``ValueError`` when ``batch_id`` already is.
        """
        if batch_id in self._held:
            raise ValueError(f"batch {batch_id} is already held")
        if len(self._held) >= self.max_in_flight:
            raise LearnerSourceFullError(
                f"{len(self._held)} rollouts already held (max_in_flight {self.max_in_flight}): "
                f"wait for a batch to be handed out before publishing {batch_id}"
            )
        self._held[batch_id] = rollout

    def forget(self, batch_id: str) -> bool:
        """Give up on ``batch_id`` (drop its rollout, release it); False if it was not held."""
        if batch_id not in self._held:
            return False
        del self._held[batch_id]
        self._release_slot(batch_id)
        return True

    @property
    def in_flight(self) -> tuple[str, ...]:
        """The ids of the batches held, oldest first."""
        return tuple(self._held)

    # The timeout is part of the public API (a trainer waits for one batch at a time).
    async def next(self, timeout: float | None = None) -> LearnerBatch[DataT]:  # noqa: ASYNC109
        """The next held batch to be scored, converted; its slot is released.

        Raises ``TimeoutError`` after ``timeout`` seconds, ``RuntimeError`` when no
        batch is held (nothing could arrive), and the converter's error when the
        rollout does not match its scored batch (the slot is released all the same:
        the batch is lost, the publisher must not wait for it).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if not self._held:
                raise RuntimeError("no batch is held: hold() a rollout before waiting for it")
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            scored = await self._source.next(remaining)
            if scored.batch_id not in self._held:
                self._skip(scored)
                continue
            rollout = self._held.pop(scored.batch_id)
            try:
                data, counters = self._convert(
                    scored,
                    rollout,
                    learner_version=self.learner_version,
                    staleness=self.staleness,
                )
            finally:
                self._release_slot(scored.batch_id)
            self.counters += counters
            return LearnerBatch(scored=scored, data=data, counters=counters)

    def _skip(self, scored: ScoredBatch) -> None:
        self.skipped += 1
        if self._on_skip is not None:
            self._on_skip(scored)
        log.warning(
            "scored batch %s skipped: its rollout is not held (held: %s)",
            scored.batch_id,
            ", ".join(self._held) or "none",
        )

    def _release_slot(self, batch_id: str) -> None:
        if self._release is not None:
            self._release(batch_id)
