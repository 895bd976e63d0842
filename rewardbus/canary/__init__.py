"""Judge canaries: a golden set of programs with known verdicts, judged continuously
through the live topics so that a judge that drifts (a new image, a toolchain
upgrade, a broken limit) shows up as a metric, a span event and an alert.

``load_golden`` reads the set (``golden/*.toml``), ``compare`` checks one reward
against its canary, ``run_canaries`` is the loop behind ``rewardbus canary``.
See docs/canaries.md.
"""

from rewardbus.canary.compare import SCORE_TOLERANCE, Mismatch, compare
from rewardbus.canary.golden import (
    SHIPPED,
    Canary,
    CanaryKind,
    GoldenSetError,
    load_golden,
    parse_golden,
)
from rewardbus.canary.loop import (
    CanaryConfig,
    CanaryMetrics,
    CanaryOutcome,
    CanaryStats,
    parse_rate,
    run_canaries,
)

__all__ = [
    "SCORE_TOLERANCE",
    "SHIPPED",
    "Canary",
    "CanaryConfig",
    "CanaryKind",
    "CanaryMetrics",
    "CanaryOutcome",
    "CanaryStats",
    "GoldenSetError",
    "Mismatch",
    "compare",
    "load_golden",
    "parse_golden",
    "parse_rate",
    "run_canaries",
]
