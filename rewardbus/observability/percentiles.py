"""Percentiles of measured samples: one rule for every report (demo, train demo, benchmarks).

The rule is ``statistics.quantiles`` with the inclusive method: linear interpolation
between the closest ranks, as numpy's ``percentile`` does by default.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Percentiles", "percentile"]


def percentile(values: Sequence[float], q: int) -> float:
    """The ``q``-th percentile (1 to 99) of ``values``; 0.0 when there are none."""
    if not 1 <= q <= 99:
        raise ValueError(f"percentile {q} is not between 1 and 99")
    if len(values) < 2:  # statistics.quantiles needs two points (before Python 3.13)
        return float(values[0]) if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


@dataclass(frozen=True, slots=True)
class Percentiles:
    """p50, p99 and the maximum of a set of samples (all 0.0 when there are none)."""

    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float], *, digits: int = 1) -> Percentiles:
        """The percentiles of ``values``, each rounded to ``digits`` decimals for printing."""
        return cls(
            p50=round(percentile(values, 50), digits),
            p99=round(percentile(values, 99), digits),
            max=round(max(values, default=0.0), digits),
        )
