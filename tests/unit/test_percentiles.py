"""The one percentile rule of every report: statistics.quantiles, inclusive method."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rewardbus.observability.percentiles import Percentiles, percentile


def test_interpolates_between_the_closest_ranks() -> None:
    values = [float(v) for v in range(1, 11)]  # 1..10
    assert percentile(values, 50) == pytest.approx(5.5)
    assert percentile(values, 99) == pytest.approx(9.91)
    assert percentile([3.0, 1.0], 50) == pytest.approx(2.0)  # order does not matter


def test_no_samples_and_one_sample() -> None:
    assert Percentiles.of([]) == Percentiles(0.0, 0.0, 0.0)
    assert Percentiles.of([7.25]) == Percentiles(7.2, 7.2, 7.2)  # rounded to 1 decimal
    assert Percentiles.of([7.25], digits=2) == Percentiles(7.25, 7.25, 7.25)
    with pytest.raises(ValueError, match="between 1 and 99"):
        percentile([1.0, 2.0], 100)


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=200))
def test_ordered_and_within_the_samples(values: list[float]) -> None:
    found = Percentiles.of(values, digits=6)
    assert min(values) - 1e-6 <= found.p50 <= found.p99 <= found.max + 1e-6
    assert found.max == round(max(values), 6)
