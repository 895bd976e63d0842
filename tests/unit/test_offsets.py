"""Commit only past records that are all done, whatever order they finish in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sandbox_workers.offsets import OffsetTracker


def test_commit_waits_for_the_oldest_in_flight_record() -> None:
    tracker: OffsetTracker[str] = OffsetTracker()
    for offset in (10, 11, 12):
        tracker.started("p0", offset)
    tracker.done("p0", 12)
    tracker.done("p0", 11)
    assert tracker.committable() == {"p0": 10}
    tracker.done("p0", 10)
    assert tracker.committable() == {"p0": 13}
    tracker.mark_committed({"p0": 13})
    assert tracker.committable() == {}


def test_forgotten_partitions_are_not_committed() -> None:
    tracker: OffsetTracker[str] = OffsetTracker()
    tracker.started("p0", 1)
    tracker.forget(["p0"])
    tracker.done("p0", 1)
    assert tracker.committable() == {}
    assert tracker.in_flight() == 0


@given(st.permutations(list(range(20))), st.integers(min_value=0, max_value=20))
def test_committed_offset_never_passes_an_unfinished_record(
    order: list[int], finished: int
) -> None:
    tracker: OffsetTracker[str] = OffsetTracker()
    for offset in range(20):
        tracker.started("p", offset)
    for offset in order[:finished]:
        tracker.done("p", offset)
    unfinished = set(order[finished:])
    commit = tracker.committable().get("p")
    if unfinished:
        assert commit == min(unfinished)
    else:
        assert commit == 20
