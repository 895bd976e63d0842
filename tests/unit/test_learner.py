"""LearnerSource without a broker: arrival order, bounds, release, skips, conversion errors."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from consumers import (
    LearnerCounters,
    LearnerSource,
    LearnerSourceFullError,
    StalenessPolicy,
    plan_batch,
)
from producers import BatchWindow
from schemas import ScoredBatch, ScoredSample


class FakeScoredBatches:
    """The ScoredBatchSource seam: batches handed over in the order they are put."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[ScoredBatch] = asyncio.Queue(maxsize=16)

    async def next(self, timeout: float | None = None) -> ScoredBatch:  # noqa: ASYNC109
        return await asyncio.wait_for(self.queue.get(), timeout)

    def put(self, *batch_ids: str) -> None:
        for batch_id in batch_ids:
            samples = [ScoredSample(sample_id=f"{batch_id}-s0", score=1.0)]
            self.queue.put_nowait(ScoredBatch(batch_id=batch_id, samples=samples))


@dataclass
class RecordingConverter:
    """Pairs each scored batch with its rollout; remembers the arguments it got."""

    calls: list[tuple[str, str, int | None, StalenessPolicy | None]] = field(default_factory=list)
    fail_on: str = ""

    def __call__(
        self,
        scored: ScoredBatch,
        rollout: str,
        /,
        *,
        learner_version: int | None,
        staleness: StalenessPolicy | None,
    ) -> tuple[tuple[str, str], LearnerCounters]:
        self.calls.append((scored.batch_id, rollout, learner_version, staleness))
        if scored.batch_id == self.fail_on:
            raise ValueError(f"rollout {rollout} does not match {scored.batch_id}")
        _plans, counters = plan_batch(scored, learner_version=learner_version, staleness=staleness)
        return (scored.batch_id, rollout), counters


def learner(
    source: FakeScoredBatches, window: BatchWindow, **kw: object
) -> tuple[LearnerSource[str, tuple[str, str]], RecordingConverter]:
    convert = RecordingConverter(fail_on=str(kw.pop("fail_on", "")))
    return (
        LearnerSource(
            source,
            max_in_flight=window.max_in_flight,
            convert=convert,
            release=window.release,
            **kw,  # type: ignore[arg-type]
        ),
        convert,
    )


async def test_batches_come_in_arrival_order_and_free_the_window() -> None:
    source, window = FakeScoredBatches(), BatchWindow(2)
    learn, convert = learner(source, window, learner_version=3)
    for batch_id in ("b0", "b1"):
        await window.acquire(batch_id)
        learn.hold(batch_id, f"rollout-{batch_id}")
    source.put("b1", "b0")  # b1 finished first
    first = await learn.next(timeout=5)
    assert (first.batch_id, first.data) == ("b1", ("b1", "rollout-b1"))
    assert window.in_flight == ("b0",) and learn.in_flight == ("b0",)
    second = await learn.next(timeout=5)
    assert second.data == ("b0", "rollout-b0") and window.in_flight == ()
    assert [c[2] for c in convert.calls] == [3, 3]
    assert learn.counters.batches == 2 and learn.counters.trained == 2


async def test_a_scored_batch_without_a_held_rollout_is_skipped_and_counted() -> None:
    source, window = FakeScoredBatches(), BatchWindow(1)
    learn, _ = learner(source, window)
    await window.acquire("mine")
    learn.hold("mine", "r")
    source.put("another-run", "mine")
    got = await learn.next(timeout=5)
    assert got.batch_id == "mine" and learn.skipped == 1


async def test_holding_is_bounded_and_once_per_batch() -> None:
    source, window = FakeScoredBatches(), BatchWindow(2)
    learn, _ = learner(source, window)
    learn.hold("a", "ra")
    with pytest.raises(ValueError, match="already held"):
        learn.hold("a", "ra")
    learn.hold("b", "rb")
    with pytest.raises(LearnerSourceFullError, match="max_in_flight 2"):
        learn.hold("c", "rc")
    with pytest.raises(ValueError, match="max_in_flight"):
        LearnerSource(source, max_in_flight=0, convert=RecordingConverter())


async def test_a_conversion_error_still_releases_the_batch() -> None:
    source, window = FakeScoredBatches(), BatchWindow(1)
    learn, _ = learner(source, window, fail_on="bad")
    await window.acquire("bad")
    learn.hold("bad", "r")
    source.put("bad")
    with pytest.raises(ValueError, match="does not match bad"):
        await learn.next(timeout=5)
    assert window.in_flight == () and learn.in_flight == ()


async def test_a_timeout_keeps_the_held_rollouts() -> None:
    source, window = FakeScoredBatches(), BatchWindow(1)
    learn, _ = learner(source, window)
    await window.acquire("slow")
    learn.hold("slow", "r")
    with pytest.raises(TimeoutError):
        await learn.next(timeout=0.01)
    assert learn.in_flight == ("slow",) and window.is_open("slow")
    source.put("slow")
    assert (await learn.next(timeout=5)).batch_id == "slow"


async def test_waiting_with_nothing_held_is_an_error_not_a_hang() -> None:
    learn, _ = learner(FakeScoredBatches(), BatchWindow(1))
    with pytest.raises(RuntimeError, match="no batch is held"):
        await learn.next(timeout=5)


async def test_forget_gives_a_batch_up_and_releases_it() -> None:
    source, window = FakeScoredBatches(), BatchWindow(1)
    learn, _ = learner(source, window)
    await window.acquire("lost")
    learn.hold("lost", "r")
    assert learn.forget("lost") and not learn.forget("lost")
    assert window.in_flight == () and learn.in_flight == ()


async def test_staleness_and_the_current_learner_version_reach_the_converter() -> None:
    source, window = FakeScoredBatches(), BatchWindow(1)
    policy = StalenessPolicy(max_staleness=0)
    learn, convert = learner(source, window, staleness=policy)
    learn.learner_version = 7  # the trainer stepped
    await window.acquire("b")
    learn.hold("b", "r")
    source.put("b")
    got = await learn.next(timeout=5)
    assert convert.calls == [("b", "r", 7, policy)]
    # Its only sample came from policy 0: seven versions behind, dropped.
    assert got.counters.stale_dropped == 1 and learn.counters.max_lag == 7
