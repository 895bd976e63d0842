"""The reward trend behind the reward-mean gauges (pure) and the batch mean it is fed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from consumers.aggregator_metrics import RewardTrend, batch_reward_mean
from schemas import ScoredBatch, ScoredSample


def test_five_falls_in_a_row_then_a_rise_resets() -> None:
    trend = RewardTrend()
    streaks = [trend.add(mean) for mean in (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.45)]
    assert streaks == [0, 1, 2, 3, 4, 5, 0]
    assert trend.last == 0.45


def test_an_equal_mean_is_no_fall() -> None:
    trend = RewardTrend()
    assert [trend.add(m) for m in (0.5, 0.4, 0.4, 0.3)] == [0, 1, 0, 1]


@given(st.lists(st.floats(0, 1), min_size=1, max_size=50))
def test_the_streak_counts_the_strict_falls_at_the_end(means: list[float]) -> None:
    trend = RewardTrend()
    for mean in means:
        trend.add(mean)
    expected = 0
    for before, after in zip(means[-2::-1], means[::-1], strict=False):
        if after >= before:
            break
        expected += 1
    assert trend.falls == expected


def test_the_batch_mean_leaves_out_missing_and_masked_samples() -> None:
    batch = ScoredBatch(
        batch_id="b",
        samples=[
            ScoredSample(sample_id="a", score=1.0),
            ScoredSample(sample_id="b", score=0.5),
            ScoredSample(sample_id="c", present=False, masked=True),
            ScoredSample(sample_id="d", score=0.0, masked=True),
        ],
    )
    assert batch_reward_mean(batch) == 0.75
    empty = ScoredBatch(batch_id="e", samples=[ScoredSample(sample_id="x", masked=True)])
    assert batch_reward_mean(empty) is None
